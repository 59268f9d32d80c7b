"""``saga messages deliver``: a message into the engine's inbox, through the app's routes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga import validation
from saga.cli.common import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    Command,
    Output,
    add_common_options,
    open_engine,
)

if TYPE_CHECKING:
    import argparse

FLAGS = {"source": "--source", "event_id": "--event-id", "type": "--type", "payload": "--payload"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``messages deliver``."""
    group = subparsers.add_parser(
        "messages", help="the engine's inbox: messages routed to sagas by the application"
    )
    commands = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    deliver = commands.add_parser(
        "deliver", help="deliver one message (applied once per source and event id)"
    )
    deliver.add_argument("--source", required=True, metavar="S", help="who sent it")
    deliver.add_argument("--event-id", required=True, metavar="E", help="its id at the source")
    deliver.add_argument("--type", required=True, metavar="T", help="its type")
    deliver.add_argument("--payload", metavar="JSON", help="its content, a JSON object")
    add_common_options(deliver, top_level=False)
    return {"messages deliver": Command(_deliver, FLAGS)}


def _deliver(args: argparse.Namespace, out: Output) -> int:
    from saga.core.messages.inbox import Message

    message = Message(
        source=args.source,
        event_id=args.event_id,
        type=args.type,
        payload=validation.json_object("payload", args.payload),
    )
    with open_engine(args) as engine:
        delivery = engine.messages.deliver(message)
    if out.as_json:
        out.json(delivery.to_json())
    elif not delivery.conflict:
        seen = " (duplicate: already delivered)" if delivery.duplicate else ""
        where = f" -> saga {delivery.saga_id} ({delivery.state})" if delivery.saga_id else ""
        out.line(f"message {delivery.source}/{delivery.event_id}: {delivery.outcome}{seen}{where}")
    if delivery.conflict:
        out.error(f"message {delivery.source}/{delivery.event_id}: {delivery.detail}")
        return EXIT_CONFLICT
    if delivery.outcome == "unmatched":
        out.error(f"message {delivery.source}/{delivery.event_id}: {delivery.detail}")
        return EXIT_NOT_FOUND
    return EXIT_OK
