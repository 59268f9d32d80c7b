"""A saga with a self-loop, for the tests that fire many events at one saga at once."""

from __future__ import annotations

from saga import Application, Machine, Registry, State, Transition

COUNTER = Machine(
    "counter",
    states=[State("open", initial=True), State("closed", terminal=True)],
    transitions=[
        Transition("tick", source="open", target="open"),
        Transition("close", source="open", target="closed"),
    ],
)


def registry() -> Registry:
    """The counter saga, alone."""
    kinds = Registry()
    kinds.register(COUNTER)
    return kinds


def app() -> Application:
    """The counter saga as an application of its own."""
    return Application(name="counters", registry=registry())
