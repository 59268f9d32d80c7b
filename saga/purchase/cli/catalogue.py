"""``saga intensive add|show|list``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli import (
    EXIT_OK,
    Output,
    add_common_options,
    open_engine,
    whole,
)
from saga.cli import (
    Leaf as Command,
)

if TYPE_CHECKING:
    import argparse

    from saga.purchase.catalogue import Intensive

FLAGS = {"intensive_id": "ID", "seats": "--seats", "price": "--price", "currency": "--currency"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add the ``intensive`` commands."""
    group = subparsers.add_parser("intensive", help="the catalogue of intensives and their seats")
    commands = group.add_subparsers(dest="action", metavar="ACTION", required=True)

    add = commands.add_parser("add", help="add an intensive (idempotent for equal values)")
    add.add_argument("id", metavar="ID", help="intensive id (letters, digits, . _ : @ -)")
    add.add_argument("--seats", type=whole, required=True, metavar="N", help="capacity, at least 1")
    add.add_argument("--price", required=True, metavar="AMOUNT", help="price, e.g. 49.90")
    add.add_argument("--currency", required=True, metavar="CUR", help="ISO 4217 code, e.g. EUR")
    add_common_options(add, top_level=False)

    show = commands.add_parser("show", help="one intensive with its seat counts")
    show.add_argument("id", metavar="ID", help="the intensive's id")
    add_common_options(show, top_level=False)

    listing = commands.add_parser("list", help="every intensive with its seat counts")
    listing.add_argument(
        "--limit", type=whole, default=1000, metavar="N", help="at most N (default: 1000)"
    )
    add_common_options(listing, top_level=False)

    return {
        "intensive add": Command(_add, FLAGS),
        "intensive show": Command(_show, FLAGS),
        "intensive list": Command(_list, {**FLAGS, "limit": "--limit"}),
    }


def _add(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args) as engine:
        intensive, created = engine.services.catalogue.add(
            args.id, seats=args.seats, price=args.price, currency=args.currency
        )
    if out.as_json:
        out.json(intensive.to_json())
    else:
        verb = "added" if created else "already present:"
        out.line(f"{verb} intensive {intensive.id}: {_summary(intensive)}")
    return EXIT_OK


def _show(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        intensive = engine.services.catalogue.get(args.id)
    if out.as_json:
        out.json(intensive.to_json())
    else:
        out.line(f"intensive {intensive.id}: {_summary(intensive)}")
    return EXIT_OK


def _list(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, create=False) as engine:
        intensives = engine.services.catalogue.list(limit=args.limit)
    if out.as_json:
        out.json([intensive.to_json() for intensive in intensives])
        return EXIT_OK
    out.table(
        ("ID", "CAPACITY", "PRICE", "HELD", "TAKEN", "FREE"),
        (
            (i.id, i.capacity, f"{i.price} {i.currency}", i.held, i.taken, i.free)
            for i in intensives
        ),
    )
    return EXIT_OK


def _summary(intensive: Intensive) -> str:
    return (
        f"{intensive.capacity} seats at {intensive.price} {intensive.currency} "
        f"(held {intensive.held}, taken {intensive.taken}, free {intensive.free})"
    )
