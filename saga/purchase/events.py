"""
The purchase's published events, and an example consumer of them.

Every state a purchase enters publishes ``purchase.<state>`` through the
engine's outbox, with the ids and the amount a consumer needs (no name, no
email: the student is an id).  ``saga consume sales`` is an example consumer:
it keeps each purchase's latest state from those events and sums seats sold
and revenue per intensive, applying each event once (the consumer inbox) in
whatever order and however often the broker delivers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from saga.codec import iso
from saga.events import Consumer, Emit
from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from saga import Tx
    from saga.events import Event

EVENT_FIELDS: Final = ("intensive_id", "student_id", "amount_minor", "currency")
SCHEMA_VERSION: Final = 1

PURCHASE_EVENTS: Final = tuple(
    Emit(
        f"purchase.{state.name}",
        on=state.name,
        fields=EVENT_FIELDS,
        schema_version=SCHEMA_VERSION,
    )
    for state in PURCHASE.states
)
"""``purchase.<state>`` on entering each state: reserved, payment_pending, confirmed, …"""


def _project(tx: Tx, event: Event) -> None:
    state = event.type.removeprefix("purchase.")
    tx.run(
        "project_sale",
        purchase_id=event.saga_id,
        intensive_id=event.data["intensive_id"],
        state=state,
        saga_version=event.saga_version,
        amount_minor=int(event.data["amount_minor"]),
        currency=event.data["currency"],
        occurred_at=iso(event.occurred_at),
    )


def _figures(rows: Any) -> dict[str, Any]:
    return {
        "intensives": {
            row["intensive_id"]: {
                "currency": row["currency"],
                "seats_sold": int(row["seats_sold"]),
                "revenue_minor": int(row["revenue_minor"]),
                "purchases": int(row["purchases"]),
            }
            for row in rows
        }
    }


def projected_sales(tx: Tx) -> dict[str, Any]:
    """The sales consumer's figures: seats sold and revenue per intensive, from events."""
    return _figures(tx.all("projected_sales"))


def recorded_sales(tx: Tx) -> dict[str, Any]:
    """The same figures from the engine's records, to compare with the consumer's."""
    return _figures(tx.all("recorded_sales"))


SALES: Final = Consumer(
    name="sales",
    bindings=("purchase.*",),
    apply=_project,
    figures=projected_sales,
    description="seats sold and revenue per intensive, from the purchase's events",
)
