"""``saga relay``, ``saga consume`` and ``saga outbox list``: events leaving the engine."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

from saga import validation
from saga.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Command,
    Output,
    add_broker_options,
    add_common_options,
    broker_url,
    exchange,
    open_engine,
    operator_name,
    positive_float,
    whole,
)
from saga.codec import iso, load_json, maybe_utc
from saga.exceptions import InvalidInput, NotFound

if TYPE_CHECKING:
    import argparse

    from saga.core.messages.outbox import Event

FLAGS = {
    "actor": "--actor",
    "reason": "--reason",
    "batch": "--batch",
    "lease_seconds": "--lease-seconds",
    "prefetch": "--prefetch",
    "queue": "--queue",
    "limit": "--limit",
    "consumer": "NAME",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``relay``, ``consume`` and ``outbox list``."""
    relay = subparsers.add_parser(
        "relay", help="publish the outbox's events (saga worker does it too, with --broker)"
    )
    relay.add_argument(
        "--batch",
        type=whole,
        default=100,
        metavar="N",
        help="events per claim, 1 to 10000 (default: 100)",
    )
    relay.add_argument(
        "--lease-seconds",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="claim lease in seconds (default: 30)",
    )
    relay.add_argument(
        "--poll-interval",
        type=positive_float,
        default=1.0,
        metavar="S",
        help="idle sleep in seconds (default: 1)",
    )
    relay.add_argument(
        "--burst", action="store_true", help="exit once nothing is due instead of waiting"
    )
    add_broker_options(relay)
    add_common_options(relay, top_level=False)

    consumer = subparsers.add_parser(
        "consume", help="run one of the application's consumers of published events"
    )
    consumer.add_argument("consumer", metavar="NAME", help="one of the application's consumers")
    consumer.add_argument(
        "--queue", metavar="Q", help="its durable queue (default: <application>.<NAME>)"
    )
    consumer.add_argument(
        "--prefetch",
        type=whole,
        default=50,
        metavar="N",
        help="unacked messages in flight (default: 50)",
    )
    consumer.add_argument(
        "--idle-exit",
        type=positive_float,
        metavar="S",
        help="exit after S seconds without a message",
    )
    consumer.add_argument("--max-messages", type=whole, metavar="N", help="exit after N messages")
    consumer.add_argument(
        "--declare",
        action="store_true",
        help="declare its queue and bindings and exit (events published before a queue "
        "is bound go to <exchange>.unrouted)",
    )
    consumer.add_argument(
        "--figures",
        action="store_true",
        help="print what the consumer computed so far and exit (no broker needed)",
    )
    add_broker_options(consumer)
    add_common_options(consumer, top_level=False)

    outbox = subparsers.add_parser("outbox", help="the transactional outbox")
    actions = outbox.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="events, newest first")
    listing.add_argument("--unpublished", action="store_true", help="only those still waiting")
    listing.add_argument("--dead", action="store_true", help="only dead-lettered ones")
    listing.add_argument("--saga", metavar="ID", help="only this saga's")
    listing.add_argument(
        "--limit", type=whole, default=50, metavar="N", help="at most N (default: 50)"
    )
    add_common_options(listing, top_level=False)
    replay = actions.add_parser(
        "replay", help="give dead-lettered events a fresh start (the relay publishes them again)"
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--event", metavar="ID", help="one dead-lettered event")
    which.add_argument("--all", action="store_true", help="every dead-lettered event")
    replay.add_argument("--reason", metavar="TEXT", help="why, for the audit trail")
    replay.add_argument(
        "--actor", metavar="NAME", help="who, for the audit trail (default: your user name)"
    )
    add_common_options(replay, top_level=False)
    return {
        "relay": Command(_relay, FLAGS),
        "consume": Command(_consume, FLAGS),
        "outbox list": Command(_outbox_list, FLAGS),
        "outbox replay": Command(_outbox_replay, FLAGS),
    }


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _relay(args: argparse.Namespace, out: Output) -> int:
    validation.batch(args.batch)
    with open_engine(args, create=False) as engine:
        relay = engine.relay(
            broker_url=broker_url(args),
            exchange=exchange(args),
            batch=args.batch,
            lease_seconds=args.lease_seconds,
        )
        if relay is None:
            raise InvalidInput(
                field="broker",
                problem="nowhere to publish: give --broker or $SAGA_BROKER_URL "
                f"(the {engine.app.name} application has no in-process subscribers)",
            )
        stop = _stop_on_signals()
        try:
            report = relay.run(
                burst=args.burst,
                stopping=stop.is_set,
                wait=stop.wait,
                poll_interval=args.poll_interval,
            )
        finally:
            relay.close()
    summary = report.as_dict()
    if out.as_json:
        out.json(summary)
    else:
        out.line(
            f"relay stopped: {summary['published']} published, {summary['failed']} failed "
            f"(retried later), {summary['lost_leases']} lost leases"
        )
    if report.failed and summary["last_error"]:
        out.error(f"some events are still waiting: {summary['last_error']}")
        return EXIT_ERROR
    return EXIT_OK


def _consume(args: argparse.Namespace, out: Output) -> int:
    from saga.core.messages.rabbitmq import (
        consume,
        declare,
    )

    with open_engine(args) as engine:
        spec = engine.app.consumer(args.consumer)
        if args.figures:
            figures = engine.db.transaction(spec.figures, write=False)
            if out.as_json:
                out.json(figures)
            else:
                _print_figures(out, figures)
            return EXIT_OK
        url = broker_url(args)
        if url is None:
            raise InvalidInput(field="broker", problem="give --broker or $SAGA_BROKER_URL")
        queue = args.queue or f"{engine.app.name}.{spec.name}"
        if args.declare:
            declare(url, exchange=exchange(args), queue=queue, bindings=spec.bindings)
            if out.as_json:
                out.json({"queue": queue, "bindings": list(spec.bindings)})
            else:
                out.line(f"declared queue {queue} bound to {', '.join(spec.bindings)}")
            return EXIT_OK
        outcomes = {"applied": 0, "duplicate": 0, "conflict": 0}

        def handle(event: Event) -> None:
            outcomes[spec.receive(engine.db, event)] += 1

        stop = _stop_on_signals()
        report = consume(
            url,
            exchange=exchange(args),
            queue=queue,
            bindings=spec.bindings,
            handle=handle,
            prefetch=args.prefetch,
            stopping=stop.is_set,
            idle_exit=args.idle_exit,
            max_messages=args.max_messages,
        )
    summary: dict[str, Any] = {**report.as_dict(), **outcomes}
    if out.as_json:
        out.json(summary)
    else:
        out.line(
            f"consumer {spec.name} stopped: {summary['received']} received, "
            f"{summary['applied']} applied, {summary['duplicate']} duplicates, "
            f"{summary['conflict']} conflicts, {summary['rejected']} rejected"
        )
    return EXIT_OK


def _print_figures(out: Output, figures: Any) -> None:
    for key, value in figures.items():
        out.line(f"{key}: {value}")


def _outbox_list(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        rows = engine.db.transaction(
            lambda tx: tx.all(
                "list_outbox",
                unpublished=args.unpublished,
                dead=args.dead,
                saga_id=args.saga,
                limit=args.limit,
            ),
            write=False,
        )
    events = [
        {
            "id": row["event_id"],
            "type": row["type"],
            "schema_version": int(row["schema_version"]),
            "saga_id": row["saga_id"],
            "saga_version": int(row["saga_version"]),
            "occurred_at": iso(maybe_utc(row["occurred_at"])),
            "data": load_json(row["data"]),
            "published_at": iso(maybe_utc(row["published_at"])),
            "dead_at": iso(maybe_utc(row["dead_at"])),
            "attempts": int(row["attempts"]),
            "errors": int(row["errors"]),
            "last_error": row["last_error"],
        }
        for row in rows
    ]
    if out.as_json:
        out.json({"events": events})
        return EXIT_OK
    out.table(
        ("EVENT", "TYPE", "PUBLISHED", "DEAD", "ERRORS"),
        ((e["id"], e["type"], e["published_at"], e["dead_at"], e["errors"]) for e in events),
    )
    return EXIT_OK


def _outbox_replay(args: argparse.Namespace, out: Output) -> int:
    actor = validation.identifier("actor", args.actor or operator_name())
    reason = None if args.reason is None else validation.text("reason", args.reason)
    from saga.core.messages.outbox import replay_dead

    with open_engine(args, create=False) as engine:
        replayed = replay_dead(
            engine.db, event_id=None if args.all else args.event, actor=actor, reason=reason
        )
    if args.event and not replayed:
        raise NotFound(kind="dead-lettered event", key=args.event)
    if out.as_json:
        out.json({"replayed": replayed})
    else:
        out.line(f"replayed {len(replayed)} dead-lettered event(s)")
    return EXIT_OK
