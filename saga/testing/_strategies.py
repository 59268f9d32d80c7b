"""Hypothesis strategies derived from a machine: events, payloads, sequences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from hypothesis import strategies as st

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from state_machine import Machine

Payloads = Mapping[str, "SearchStrategy[Mapping[str, Any]]"]
# An event no machine declares: the engine must refuse it and change nothing.
UNDECLARED: Final = "undeclared_event"
_EMPTY: Final[SearchStrategy[Mapping[str, Any]]] = st.just({})


def events(machine: Machine, *, undeclared: bool = True) -> SearchStrategy[str]:
    """The machine's events, and (with ``undeclared``) one it does not declare."""
    names: Sequence[str] = machine.events
    if undeclared:
        names = (*names, UNDECLARED)
    return st.sampled_from(names)


def payloads(event: str, hints: Payloads | None = None) -> SearchStrategy[Mapping[str, Any]]:
    """
    Payloads for ``event``: the hint registered for it, else ``{}``.

    A hint should produce payloads that satisfy the event's guards and
    payloads that violate them (``st.sampled_from([{"signature": "ann"},
    {"signature": ""}])``), so both branches are explored.
    """
    if hints and event in hints:
        return hints[event]
    return _EMPTY


def event_sequences(
    machine: Machine,
    *,
    hints: Payloads | None = None,
    max_size: int = 20,
    undeclared: bool = True,
) -> SearchStrategy[list[tuple[str, Mapping[str, Any]]]]:
    """Sequences of ``(event, payload)``, each payload drawn for its event."""
    step = events(machine, undeclared=undeclared).flatmap(
        lambda event: st.tuples(st.just(event), payloads(event, hints))
    )
    return st.lists(step, max_size=max_size)
