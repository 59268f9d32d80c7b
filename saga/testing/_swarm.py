"""
Swarm testing: which of the kit's own moves one example makes.

Each example of :class:`~saga.testing.SagaStateMachine` draws a swarm when
it is guided; its rules' preconditions read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from hypothesis import strategies as st

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from state_machine import Machine


@dataclass(frozen=True, slots=True)
class _Swarm:
    """
    Which of the kit's own moves one example makes (swarm testing).

    Every move enabled in every example spreads each example thin: an
    example that never cancels goes deeper into the paths cancelling cuts
    short, one without crashes reaches what a crash would retry.  Shrinking
    goes toward everything enabled, the kit's plain rules.
    """

    quiet_events: frozenset[str] = frozenset()
    crashes: bool = True
    stale: bool = True
    undeclared: bool = True

    def describe(self) -> str:
        off = [f"never fires {e}" for e in sorted(self.quiet_events)]
        off += [what for what, on in self._moves() if not on]
        return ", ".join(off)

    def _moves(self) -> list[tuple[str, bool]]:
        return [
            ("crashes no step", self.crashes),
            ("decides on no stale version", self.stale),
            ("fires no undeclared event", self.undeclared),
        ]


_ALL_ON: Final = _Swarm()


def _swarms(machine: Machine) -> SearchStrategy[_Swarm]:
    """
    Swarms of one machine: each ending may be left out, and each fault.

    An ending is an event whose every arrow ends the saga (a cancel, a reject).

    Events that lead on are never left out: without them nothing goes deeper.
    """
    endings = sorted(
        {t.event for t in machine.transitions}
        - {t.event for t in machine.transitions if not machine.state(t.target).terminal}
    )
    on = st.booleans().map(lambda off: not off)
    return st.builds(
        _Swarm,
        quiet_events=st.frozensets(st.sampled_from(endings)) if endings else st.just(frozenset()),
        crashes=on,
        stale=on,
        undeclared=on,
    )
