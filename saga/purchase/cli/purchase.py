"""``saga purchase start|show|list|cancel``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga import validation as _validation
from saga.cli import (
    EXIT_OK,
    Output,
    add_common_options,
    open_engine,
    print_money,
    summary_of,
    whole,
)
from saga.cli import (
    Leaf as Command,
)
from saga.codec import iso
from state_machine.purchase import PURCHASE
from steps import DEFAULT_PAYMENT_METHOD, PAYMENT_METHODS

if TYPE_CHECKING:
    import argparse

    from saga.purchase.purchases import Purchase

FLAGS = {
    "operation_id": "--operation-id",
    "intensive_id": "--intensive",
    "student_id": "--student",
    "payment_method": "--payment-method",
    "hold_seconds": "--hold-seconds",
    "state": "--state",
    "limit": "--limit",
    "reason": "--reason",
    "purchase_id": "ID",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add the ``purchase`` commands."""
    from steps.purchase import DEFAULT_HOLD_SECONDS

    group = subparsers.add_parser("purchase", help="purchases of a seat of an intensive")
    commands = group.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = commands.add_parser(
        "start", help="accept a purchase: hold a seat and queue the payment request"
    )
    start.add_argument(
        "--operation-id", required=True, metavar="OP", help="idempotency key chosen by the client"
    )
    start.add_argument(
        "--intensive", required=True, metavar="ID", help="the intensive to buy a seat of"
    )
    start.add_argument("--student", required=True, metavar="ID", help="who buys the seat")
    start.add_argument(
        "--payment-method",
        default=DEFAULT_PAYMENT_METHOD.value,
        metavar="PM",
        help=f"sandbox payment method (default: {DEFAULT_PAYMENT_METHOD.value}): "
        + ", ".join(PAYMENT_METHODS),
    )
    start.add_argument(
        "--hold-seconds",
        type=whole,
        default=DEFAULT_HOLD_SECONDS,
        metavar="S",
        help=f"how long the seat is held without payment (default: {DEFAULT_HOLD_SECONDS})",
    )
    add_common_options(start, top_level=False)

    show = commands.add_parser("show", help="one purchase with its history")
    show.add_argument("id", metavar="ID", help="the purchase's id")
    add_common_options(show, top_level=False)

    listing = commands.add_parser("list", help="purchases, newest first")
    listing.add_argument(
        "--state", metavar="S", help="only this state: " + ", ".join(PURCHASE.state_names)
    )
    listing.add_argument("--intensive", metavar="ID", help="only this intensive")
    listing.add_argument(
        "--limit", type=whole, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_common_options(listing, top_level=False)

    cancel = commands.add_parser(
        "cancel", help="cancel a purchase (refunds it if it was confirmed)"
    )
    cancel.add_argument("id", metavar="ID", help="the purchase's id")
    cancel.add_argument("--reason", required=True, metavar="TEXT", help="why, for the audit trail")
    add_common_options(cancel, top_level=False)

    return {
        "purchase start": Command(_start, FLAGS),
        "purchase show": Command(_show, FLAGS),
        "purchase list": Command(_list, {**FLAGS, "intensive_id": "--intensive"}),
        "purchase cancel": Command(_cancel, FLAGS),
    }


def _start(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        result = engine.services.purchases.start(
            operation_id=args.operation_id,
            intensive_id=args.intensive,
            student_id=args.student,
            payment_method=args.payment_method,
            hold_seconds=args.hold_seconds,
        )
    purchase = result.purchase
    if out.as_json:
        out.json(purchase.to_json())
    else:
        verb = "accepted" if result.created else "already accepted:"
        out.line(f"{verb} purchase {purchase.id} ({_brief(purchase)})")
    return EXIT_OK


def _show(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        purchase = engine.services.purchases.get(args.id)
        money = summary_of(engine, purchase.id)
    if out.as_json:
        out.json({**purchase.to_json(), "money": None if money is None else money.to_json()})
        return EXIT_OK
    out.line(f"purchase {purchase.id}")
    for label, value in (
        ("operation id", purchase.operation_id),
        ("intensive", purchase.intensive_id),
        ("student", purchase.student_id),
        ("state", f"{purchase.state} (version {purchase.version})"),
        ("seat", purchase.seat),
        ("amount", f"{purchase.to_json()['amount']} {purchase.currency}"),
        ("payment method", purchase.payment_method),
        (
            "deadline",
            f"{purchase.deadline_event} at {iso(purchase.deadline_at)}"
            if purchase.deadline_at
            else None,
        ),
        ("payment", _payment_line(purchase)),
        ("refund", _refund_line(purchase)),
        ("reconciliation", _item_line(purchase)),
    ):
        out.line(f"  {label + ':':<16}{'-' if value is None else value}")
    print_money(out, money)
    out.line("history:")
    out.table(
        ("  AT", "FROM", "TO", "EVENT", "ACTOR", "CAUSE"),
        (
            (f"  {iso(h.at)}", h.from_state, h.to_state, h.event, h.actor, h.cause)
            for h in purchase.history
        ),
    )
    return EXIT_OK


def _list(args: argparse.Namespace, out: Output) -> int:
    from saga.purchase.purchases import LIST_MAX

    _validation.whole_number("limit", args.limit, minimum=1, maximum=LIST_MAX)
    with open_engine(args, create=False) as engine:
        purchases = engine.services.purchases.list(
            state=args.state, intensive_id=args.intensive, limit=args.limit + 1
        )
    if len(purchases) > args.limit:
        purchases = purchases[: args.limit]
        out.note(
            f"showing the newest {args.limit} purchases only; there are more "
            "(narrow with --state/--intensive, or raise --limit)"
        )
    if out.as_json:
        out.json([purchase.to_json(with_history=False) for purchase in purchases])
        return EXIT_OK
    out.table(
        ("ID", "STATE", "SEAT", "INTENSIVE", "STUDENT", "OPERATION", "CREATED"),
        (
            (p.id, p.state, p.seat, p.intensive_id, p.student_id, p.operation_id, iso(p.created_at))
            for p in purchases
        ),
    )
    return EXIT_OK


def _cancel(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        engine.services.purchases.cancel(args.id, reason=args.reason)
        purchase = engine.services.purchases.get(args.id)
    if out.as_json:
        out.json(purchase.to_json())
    else:
        out.line(f"purchase {purchase.id} is now {_brief(purchase)}")
    return EXIT_OK


def _payment_line(purchase: Purchase) -> str | None:
    from saga.purchase.money import format_minor

    payment = purchase.payment
    if payment is None:
        return None
    charged = payment.get("charged_minor")
    amount = "" if charged is None else f", charged {format_minor(charged, purchase.currency)}"
    return f"{payment['status']}{amount} (key {payment['key']}, id {payment['payment_id'] or '-'})"


def _refund_line(purchase: Purchase) -> str | None:
    from saga.purchase.money import format_minor

    refund = purchase.refund
    if refund is None:
        return None
    amount = format_minor(int(refund["amount_minor"]), purchase.currency)
    return f"{refund['status']}, {amount} (key {refund['key']}, id {refund['refund_id'] or '-'})"


def _item_line(purchase: Purchase) -> str | None:
    item = purchase.reconciliation
    if item is None:
        return None
    return (
        f"{item['id']} {item['status']}: {item['reason']}, owner {item['owner']}, "
        f"next check {item['next_check_at'] or '-'}, {item['attempts']} check(s)"
    )


def _brief(purchase: Purchase) -> str:
    text = f"{purchase.state}, seat {purchase.seat}"
    if purchase.deadline_at is not None:
        text += f", {purchase.deadline_event} at {iso(purchase.deadline_at)}"
    return text
