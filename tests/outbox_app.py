"""An application that publishes events: orders placed, paid, shipped or cancelled."""

from __future__ import annotations

from saga import Application, Machine, Registry, State, Transition
from saga.events import Emit

order = Machine(
    "order",
    states=[
        State("placed", initial=True),
        State("paid"),
        State("shipped", terminal=True),
        State("cancelled", terminal=True),
    ],
    transitions=[
        Transition("pay", source="placed", target="paid"),
        Transition("ship", source="paid", target="shipped"),
        Transition("cancel", source=("placed", "paid"), target="cancelled"),
    ],
)

EVENTS = (
    Emit("order.placed", on="placed", fields=("customer_id", "total")),
    Emit("order.paid", on="paid", fields=("total",)),
    Emit(
        "order.closed",
        on=("shipped", "cancelled"),
        compute=lambda saga: {"outcome": saga.state},
        schema_version=2,
    ),
)


def registry() -> Registry:
    """A registry of the order saga with its events."""
    made = Registry()
    made.register(order, emits=EVENTS)
    return made


def app(**changes) -> Application:
    """The order application (``changes`` replace its fields)."""
    fields = {"name": "orders", "registry": registry(), **changes}
    return Application(**fields)


orders = app()
