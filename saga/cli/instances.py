"""``saga instances start|list|show|fire|cancel``: any saga of any registered kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli.common import EXIT_OK, Command, Output, add_common_options, open_engine, whole
from saga.codec import iso

if TYPE_CHECKING:
    import argparse

FLAGS = {
    "saga_id": "ID",
    "kind": "--kind",
    "state": "--state",
    "limit": "--limit",
    "event": "EVENT",
    "payload": "--payload",
    "actor": "--actor",
    "reason": "--reason",
    "expected_version": "--expected-version",
}
START_FLAGS = {**FLAGS, "kind": "KIND", "operation_id": "--operation-id", "request": "--request"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add the ``instances`` commands."""
    group = subparsers.add_parser("instances", help="sagas of any kind the application registers")
    commands = group.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = commands.add_parser(
        "start", help="start a saga of KIND; the same --operation-id and request find it again"
    )
    start.add_argument("kind", metavar="KIND", help="the saga kind, one the application registers")
    start.add_argument(
        "--operation-id",
        required=True,
        metavar="ID",
        help="idempotency key chosen by the client (another request under it: exit 3)",
    )
    start.add_argument(
        "--request",
        default="{}",
        metavar="JSON",
        help="what the saga is started with, a JSON object (default: {})",
    )
    add_common_options(start, top_level=False)

    listing = commands.add_parser("list", help="sagas, newest first")
    listing.add_argument("--kind", metavar="K", help="only this saga kind")
    listing.add_argument("--state", metavar="S", help="only this state (one the kinds declare)")
    listing.add_argument(
        "--stuck",
        action="store_true",
        help="only sagas in a non-terminal state with no work due or running and no open item",
    )
    listing.add_argument(
        "--limit", type=whole, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_common_options(listing, top_level=False)

    show = commands.add_parser(
        "show", help="one saga: history, pending jobs and timers, dead letters, open items"
    )
    show.add_argument("id", metavar="ID", help="the saga's id")
    add_common_options(show, top_level=False)

    fire = commands.add_parser("fire", help="an operator's event, audited with who and why")
    fire.add_argument("id", metavar="ID", help="the saga's id")
    fire.add_argument("event", metavar="EVENT", help="an event its machine declares")
    fire.add_argument("--payload", metavar="JSON", help="the event's payload, a JSON object")
    fire.add_argument("--actor", required=True, metavar="NAME", help="who, for the audit trail")
    fire.add_argument("--reason", required=True, metavar="TEXT", help="why, for the audit trail")
    fire.add_argument(
        "--expected-version",
        type=whole,
        metavar="V",
        help="fire only if the saga is still at version V (the one you looked at); "
        "moved on meanwhile: exit 3, nothing changed",
    )
    add_common_options(fire, top_level=False)

    cancel = commands.add_parser("cancel", help="fire the kind's declared cancel event")
    cancel.add_argument("id", metavar="ID", help="the saga's id")
    cancel.add_argument("--actor", required=True, metavar="NAME", help="who, for the audit trail")
    cancel.add_argument("--reason", required=True, metavar="TEXT", help="why, for the audit trail")
    add_common_options(cancel, top_level=False)

    why = subparsers.add_parser("explain", help="why a saga is where it is, and what happens next")
    why.add_argument("id", metavar="ID", help="the saga")
    add_common_options(why, top_level=False)
    return {
        "explain": Command(_explain, FLAGS),
        "instances start": Command(_start, START_FLAGS),
        "instances list": Command(_list, FLAGS),
        "instances show": Command(_show, FLAGS),
        "instances fire": Command(_fire, FLAGS),
        "instances cancel": Command(_cancel, FLAGS),
    }


def _start(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        started = engine.instances.start(
            args.kind, operation_id=args.operation_id, request=args.request
        )
        shown = engine.instances.show(started.saga.id).to_json()
    if out.as_json:
        out.json({**shown, "operation_id": args.operation_id, "created": started.created})
        return EXIT_OK
    verb = "accepted" if started.created else "already accepted:"
    out.line(
        f"{verb} {shown['kind']} {shown['id']} ({shown['state']}, version {shown['version']}, "
        f"definition v{shown['definition_version']})"
    )
    return EXIT_OK


def _list(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        found = engine.instances.list(
            kind=args.kind, state=args.state, stuck=args.stuck, limit=args.limit
        )
        terminal = {saga.id: engine.instances.terminal(saga) for saga in found}
    if out.as_json:
        from saga.core.sagas.instances import saga_json

        out.json([saga_json(saga, terminal=terminal[saga.id]) for saga in found])
        return EXIT_OK
    out.table(
        ("ID", "KIND", "DEFINITION", "STATE", "VERSION", "DEADLINE", "UPDATED"),
        (
            (
                s.id,
                s.kind,
                f"v{s.definition_version}",
                s.state,
                s.version,
                f"{s.deadline_event} at {iso(s.deadline_at)}" if s.deadline_at else None,
                iso(s.updated_at),
            )
            for s in found
        ),
    )
    return EXIT_OK


def _show(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        instance = engine.instances.show(args.id)
    shown = instance.to_json()
    if out.as_json:
        out.json(shown)
        return EXIT_OK
    saga = instance.saga
    final = " (final)" if instance.terminal else ""
    out.line(
        f"{saga.kind} {saga.id}: {saga.state}{final}, version {saga.version}, "
        f"definition v{saga.definition_version}"
    )
    if saga.deadline_at is not None:
        out.line(f"  deadline: {saga.deadline_event} at {iso(saga.deadline_at)}")
    out.line("history:")
    out.table(
        ("  AT", "DEF", "FROM", "TO", "EVENT", "ACTOR", "CAUSE"),
        (
            (
                f"  {iso(h.at)}",
                f"v{h.definition_version}",
                h.from_state,
                h.to_state,
                h.event,
                h.actor,
                h.cause,
            )
            for h in instance.history
        ),
    )
    for title in ("jobs", "timers", "dead_letters"):
        out.line(f"{title.replace('_', ' ')}:")
        out.table(
            ("  JOB", "KIND", "STATE", "ATTEMPTS", "DUE", "LEASE UNTIL", "LAST ERROR"),
            (
                (
                    f"  {j['id']}",
                    j["kind"],
                    j["state"],
                    f"{j['attempts']}/{j['max_attempts']}",
                    j["available_at"],
                    j["lease_until"],
                    (j["last_error"] or "")[:60],
                )
                for j in shown[title]
            ),
        )
    out.line("open items:")
    for item in instance.items:
        out.line(
            f"  {item.id} ({item.kind}): {item.reason}, owner {item.owner}, "
            f"next check {iso(item.next_check_at)}"
        )
    if instance.refused:
        out.line("refused events (not applied):")
        for refused in instance.refused:
            out.line(
                f"  {refused['at']}  {refused['event']} from {refused['origin']} "
                f"by {refused['actor']}: {refused['cause'] or '-'}"
            )
    return EXIT_OK


def _fire(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        fired = engine.instances.fire(
            args.id,
            args.event,
            payload=args.payload,
            actor=args.actor,
            reason=args.reason,
            expected_version=args.expected_version,
        )
        return _moved(out, engine.instances.show(fired.saga.id).to_json())


def _cancel(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        fired = engine.instances.cancel(args.id, actor=args.actor, reason=args.reason)
        return _moved(out, engine.instances.show(fired.saga.id).to_json())


def _moved(out: Output, shown: dict[str, object]) -> int:
    if out.as_json:
        out.json(shown)
    else:
        out.line(f"{shown['kind']} {shown['id']} is now {shown['state']}")
    return EXIT_OK


def _explain(args: argparse.Namespace, out: Output) -> int:
    from saga.core.sagas.explain import explain

    with open_engine(args, create=False) as engine:
        explanation = explain(engine.instances, args.id)
    if out.as_json:
        out.json(explanation.to_json())
        return EXIT_OK
    shown = explanation.to_json()
    out.line(
        f"{shown['kind']} v{shown['definition_version']} {shown['id']} in {shown['state']}: "
        f"{shown['verdict']}"
    )
    for reason in shown["reasons"]:
        out.line(f"  - {reason}")
    if shown["next"]:
        out.line("next:")
        for entry in shown["next"]:
            out.line(f"  {entry['at']}  {entry['what']}")
    return EXIT_OK
