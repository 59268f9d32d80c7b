"""The money of a saga as the CLI prints it (``recon show``, and an application's commands)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.codec import iso, maybe_utc

if TYPE_CHECKING:
    from saga import Engine
    from saga.cli.common import Output
    from saga.core.sagas.money import MoneySummary

_DIRECTION = {"in": "received", "out": "given back"}


def summary_of(engine: Engine, saga_id: str) -> MoneySummary | None:
    """The application's money summary of one saga, if it keeps one."""
    found: MoneySummary | None = engine.app.money(engine, [saga_id]).get(saga_id)
    return found


def print_money(out: Output, money: MoneySummary | None) -> None:
    """Expected, charged, refunded, held and the difference; then money moved outside."""
    if money is None:
        return
    out.line("money:")
    difference = money.difference_minor
    for label, value in (
        ("expected", f"{money.format(money.expected_minor) or '-'} ({money.expected_note})"),
        ("charged", money.format(money.charged_minor)),
        ("refunded", money.format(money.refunded_minor)),
        ("held", money.format(money.held_minor)),
        ("difference", "-" if difference is None else money.format(difference)),
    ):
        out.line(f"  {label + ':':<16}{value}")
    if not money.external:
        out.line(f"  {'outside:':<16}none (all of it through the provider)")
        return
    out.line("  outside the provider:")
    for moved in money.external:
        at = moved.at if isinstance(moved.at, str) or moved.at is None else iso(maybe_utc(moved.at))
        out.line(
            f"    {_DIRECTION.get(moved.direction, moved.direction)} "
            f"{money.format(moved.amount_minor)}  ref {moved.reference}  "
            f"by {moved.operator} at {at}: {moved.reason}"
        )
