"""``saga webhook …``, ``saga recon …``, ``saga console``, ``saga operator …``, ``saga verify``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli import web
from saga.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Command,
    Output,
    add_common_options,
    open_engine,
    whole,
)
from saga.cli.money import print_money, summary_of
from saga.codec import iso
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse

    from saga.core.recon.items import ReconItem

FLAGS = {
    "amount": "--amount",
    "item_id": "ID",
    "operator": "--operator",
    "outcome": "--outcome",
    "reason": "--reason",
    "status": "--status",
    "owner": "--owner",
    "limit": "--limit",
    "external_ref": "--external-ref",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``webhook``, ``recon``, ``console``, ``operator`` and ``verify``."""
    webhook = subparsers.add_parser("webhook", help="provider events into the inbox")
    hooks = webhook.add_subparsers(dest="action", metavar="ACTION", required=True)
    web.add_serve_parser(hooks)

    recon = subparsers.add_parser("recon", help="the reconciliation queue")
    items = recon.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = items.add_parser("list", help="items, oldest first")
    listing.add_argument(
        "--status",
        default="open",
        choices=("open", "resolved", "all"),
        help="which items (default: open)",
    )
    listing.add_argument("--owner", metavar="NAME", help="only items this operator took")
    listing.add_argument(
        "--overdue", action="store_true", help="only items past their deadline (escalated)"
    )
    listing.add_argument(
        "--limit", type=whole, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_common_options(listing, top_level=False)
    show = items.add_parser("show", help="one item, its evidence and its audit trail")
    show.add_argument("id", metavar="ID", help="the item's id")
    add_common_options(show, top_level=False)
    assign = items.add_parser("assign", help="take an item from the checker")
    assign.add_argument("id", metavar="ID", help="the item's id")
    assign.add_argument(
        "--operator", required=True, metavar="NAME", help="who takes it, for the audit trail"
    )
    assign.add_argument(
        "--version",
        type=whole,
        metavar="V",
        help="refuse if the item changed since you read version V",
    )
    add_common_options(assign, top_level=False)
    resolve = items.add_parser(
        "resolve",
        help="decide an item after the provider is asked again: paid, not_paid, refund, "
        "refunded (review items: reviewed)",
    )
    resolve.add_argument("id", metavar="ID", help="the item's id")
    resolve.add_argument(
        "--outcome",
        required=True,
        metavar="O",
        help="one of the outcomes of the saga kind's reconciliation policy "
        "(paid | not_paid, say), or reviewed for a review item",
    )
    resolve.add_argument(
        "--external-ref",
        metavar="REF",
        help="money that moved outside the provider (a bank transfer): its reference; with "
        "paid (received) or refunded (given back)",
    )
    resolve.add_argument(
        "--amount",
        metavar="A",
        help="the external movement's amount in the saga's currency "
        "(default: the price, or the money held)",
    )
    resolve.add_argument(
        "--operator", required=True, metavar="NAME", help="who decides, for the audit trail"
    )
    resolve.add_argument("--reason", required=True, metavar="TEXT", help="why, for the audit trail")
    resolve.add_argument(
        "--version",
        type=whole,
        metavar="V",
        help="refuse if the item changed since you read version V",
    )
    add_common_options(resolve, top_level=False)

    web.add_console_parsers(subparsers)

    check = subparsers.add_parser("verify", help="check every invariant; exit 0 only if all hold")
    add_common_options(check, top_level=False)

    return {
        "webhook serve": Command(web.serve_command, web.FLAGS),
        "webhook refusals": Command(web.refusals_command, web.FLAGS),
        "console": Command(web.console_command, web.FLAGS),
        "operator add": Command(web.operator_add, web.FLAGS),
        "operator list": Command(web.operator_list, web.FLAGS),
        "operator disable": Command(web.operator_disable, web.FLAGS),
        "operator sign-ins": Command(web.operator_sign_ins, web.FLAGS),
        "recon list": Command(_recon_list, FLAGS),
        "recon show": Command(_recon_show, FLAGS),
        "recon assign": Command(_recon_assign, FLAGS),
        "recon resolve": Command(_recon_resolve, FLAGS),
        "verify": Command(_verify, FLAGS),
    }


def _recon_list(args: argparse.Namespace, out: Output) -> int:
    status = None if args.status == "all" else args.status
    with open_engine(args, create=False) as engine:
        items = engine.recon.find(
            status=status, owner=args.owner, overdue=args.overdue, limit=args.limit
        )
    if out.as_json:
        out.json([item.to_json() for item in items])
        return EXIT_OK
    out.table(
        (
            "ID",
            "SAGA",
            "KIND",
            "STATUS",
            "REASON",
            "OWNER",
            "ATTEMPTS",
            "NEXT CHECK",
            "DEADLINE",
        ),
        (
            (
                i.id,
                i.saga_id,
                i.kind,
                i.status,
                i.reason,
                i.owner,
                f"{i.attempts}/{i.max_attempts}",
                iso(i.next_check_at),
                f"{iso(i.deadline)}{' OVERDUE' if i.overdue_at is not None else ''}",
            )
            for i in items
        ),
    )
    return EXIT_OK


def _recon_show(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        item, events = engine.recon.show(args.id)
        saga_kind = engine.sagas.get(item.saga_id).kind
        money = summary_of(engine, item.saga_id)
    if out.as_json:
        shown = None if money is None else money.to_json()
        out.json({**item.to_json(), "money": shown, "events": events})
        return EXIT_OK
    _describe(out, item, saga_kind)
    print_money(out, money)
    out.line("events:")
    for entry in events:
        out.line(f"  {entry['at']}  {entry['actor']:<22} {entry['action']:<16} {entry['detail']}")
    return EXIT_OK


def _recon_assign(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        item = engine.recon.assign(args.id, operator=args.operator, expected_version=args.version)
    if out.as_json:
        out.json(item.to_json())
    else:
        out.line(f"item {item.id} is now owned by {item.owner} (version {item.version})")
    return EXIT_OK


def _recon_resolve(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        amount = None
        if args.amount is not None:
            if args.external_ref is None:
                raise InvalidInput(field="amount", problem="goes with --external-ref")
            amount = engine.recon.parse_amount(args.id, args.amount)
        item = engine.recon.resolve(
            args.id,
            outcome=args.outcome,
            operator=args.operator,
            reason=args.reason,
            expected_version=args.version,
            external_ref=args.external_ref,
            amount_minor=amount,
        )
        saga = engine.sagas.get(item.saga_id)
        checked = engine.recon.judge_for(saga.kind) is not None
    if out.as_json:
        # purchase_state: the name the purchase's scripts know; saga_state for any kind.
        out.json(
            {
                **item.to_json(),
                "purchase_state": saga.state,
                "saga_state": saga.state,
                "checked": checked,
            }
        )
    else:
        out.line(
            f"item {item.id} resolved as {item.resolution} by {item.resolved_by}; "
            f"{saga.kind} {saga.id} is now {saga.state}"
        )
        if not checked:
            out.line(
                f"note: the decision was not checked: the {saga.kind} reconciliation "
                "policy says unchecked (no judge asked the outside world)"
            )
    return EXIT_OK


def _describe(out: Output, item: ReconItem, saga_kind: str) -> None:
    out.line(f"item {item.id} ({item.status}, version {item.version})")
    for label, value in (
        (saga_kind, item.saga_id),
        ("subject", item.subject),
        ("reason", item.reason),
        ("owner", item.owner),
        ("attempts", f"{item.attempts}/{item.max_attempts}"),
        ("next check", iso(item.next_check_at)),
        ("deadline", iso(item.deadline)),
        ("kind", item.kind),
        ("escalated", iso(item.escalated_at)),
        ("overdue", iso(item.overdue_at)),
        ("resolution", item.resolution),
        ("resolved by", item.resolved_by),
        ("latest reading", item.latest_reading),
    ):
        out.line(f"  {label + ':':<16}{'-' if value is None else value}")
    out.line(f"  evidence:       {item.evidence}")


def _verify(args: argparse.Namespace, out: Output) -> int:
    from saga.core.ops.verify import verify

    with open_engine(args, create=False) as engine:
        report = verify(engine)
    if out.as_json:
        out.json(report.to_json())
    else:
        for invariant in report.invariants:
            mark = "ok  " if not invariant.problems else "FAIL"
            out.line(
                f"{mark} {invariant.name:<26} checked {invariant.checked:>6}, "
                f"violations {len(invariant.problems)}"
            )
            for example in invariant.problems[:3]:
                out.line(f"       {example}")
        out.line("all invariants hold" if report.ok else "some invariants are broken")
    return EXIT_OK if report.ok else EXIT_ERROR
