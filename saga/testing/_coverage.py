"""
What a run of the kit reached of a machine: its states and declared transitions.

A transition is one arrow of the definition: ``(source, event, target)``,
one per source state of a declared :class:`~saga.Transition`.  The kit
records the arrows the sagas' persisted histories took (whoever fired them:
the kit, a step, a timer, the reconciliation checker), per example and for
the whole run; :func:`~saga.testing.run_saga_test` returns the run's
:class:`Coverage` and prints it, and the pytest plugin repeats every run's
in the terminal summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga.core.store.records import TransitionRecord
    from state_machine import Machine

Arrow = tuple[str, str, str]

# Every run's report, in order, for the pytest plugin's terminal summary.
REPORTS: list[Coverage] = []


def declared_arrows(machine: Machine) -> tuple[Arrow, ...]:
    """Every declared arrow: one per source state of each transition."""
    return tuple(
        dict.fromkeys(
            (source, transition.event, transition.target)
            for transition in machine.transitions
            for source in transition.source
        )
    )


def arrows_of(history: Iterable[TransitionRecord]) -> set[Arrow]:
    """The arrows a persisted history took (its start is not one)."""
    return {
        (row.from_state, row.event, row.to_state) for row in history if row.from_state is not None
    }


@dataclass
class Coverage:
    """The states and declared transitions a run reached, and how many examples it took."""

    kind: str
    states: tuple[str, ...]
    transitions: tuple[Arrow, ...]
    reached_states: set[str] = field(default_factory=set)
    reached_transitions: set[Arrow] = field(default_factory=set)
    examples: int = 0
    # The example in which each arrow was first reached (1-based).
    first_reached: dict[Arrow, int] = field(default_factory=dict)

    @classmethod
    def of(cls, machine: Machine) -> Coverage:
        """Nothing reached yet of ``machine``."""
        return cls(
            kind=machine.name,
            states=tuple(state.name for state in machine.states),
            transitions=declared_arrows(machine),
        )

    def add(self, states: Iterable[str], arrows: Iterable[Arrow]) -> None:
        """One example's reach."""
        self.reached_states.update(states)
        for arrow in arrows:
            if arrow in self.transitions:
                self.reached_transitions.add(arrow)
                self.first_reached.setdefault(arrow, self.examples)

    @property
    def missing_states(self) -> list[str]:
        """Declared states no saga entered."""
        return [state for state in self.states if state not in self.reached_states]

    @property
    def missing_transitions(self) -> list[Arrow]:
        """Declared arrows no saga took."""
        return [arrow for arrow in self.transitions if arrow not in self.reached_transitions]

    @property
    def complete(self) -> bool:
        """Every declared state entered and every declared transition taken."""
        return not self.missing_states and not self.missing_transitions

    def to_json(self) -> dict[str, Any]:
        """The report as data."""
        return {
            "kind": self.kind,
            "examples": self.examples,
            "states": {"declared": len(self.states), "reached": len(self.reached_states)},
            "transitions": {
                "declared": len(self.transitions),
                "reached": len(self.reached_transitions),
            },
            "missing_states": self.missing_states,
            "missing_transitions": [_arrow(a) for a in self.missing_transitions],
        }

    def report(self) -> str:
        """A few lines a person reads after the run."""
        lines = [
            f"saga.testing coverage of {self.kind} ({self.examples} examples): "
            f"states {len(self.reached_states & set(self.states))}/{len(self.states)}, "
            f"transitions {len(self.reached_transitions)}/{len(self.transitions)}"
        ]
        lines += [f"  state never entered: {state}" for state in self.missing_states]
        lines += [f"  transition never taken: {_arrow(a)}" for a in self.missing_transitions]
        return "\n".join(lines)


def _arrow(arrow: Arrow) -> str:
    source, event, target = arrow
    return f"{source} --{event}--> {target}"
