"""A validated, immutable saga definition and its pure decision function."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from state_machine._validate import origin_problems, problems
from state_machine.errors import DefinitionError, TransitionNotAllowed

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from state_machine._definition import State, Transition

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class Machine:
    """
    A saga definition: named, versioned, validated when it is built.

    Building it runs every check of :mod:`state_machine._validate` and raises
    :class:`~state_machine.errors.DefinitionError` listing all findings, so a
    broken definition fails at import time, not when a saga first hits the
    broken path.

    ``fired_by`` says who may fire an event (:data:`~state_machine.ORIGINS`:
    ``operator``, ``route``, ``step``, ``timer``, ``reconciliation``); an
    event it does not name may be fired by any of them, except the outcomes
    of a reconciliation policy, which the runtime keeps to reconciliation.
    """

    __slots__ = ("_by_event", "_states", "fired_by", "name", "states", "transitions", "version")

    def __init__(
        self,
        name: str,
        *,
        version: int = 1,
        states: Iterable[State],
        transitions: Iterable[Transition],
        fired_by: Mapping[str, str | Iterable[str]] | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.states: tuple[State, ...] = tuple(states)
        self.transitions: tuple[Transition, ...] = tuple(transitions)
        self.fired_by: Mapping[str, frozenset[str]] = MappingProxyType(
            {
                event: frozenset((who,) if isinstance(who, str) else who)
                for event, who in (fired_by or {}).items()
            }
        )
        found = problems(name, version, self.states, self.transitions)
        found += origin_problems(self.states, self.transitions, self.fired_by)
        if found:
            raise DefinitionError(machine=name, problems=found)
        self._states = {state.name: state for state in self.states}
        by_event: dict[tuple[str, str], list[Transition]] = {}
        for transition in self.transitions:
            for source in transition.source:
                by_event.setdefault((transition.event, source), []).append(transition)
        self._by_event = {key: tuple(value) for key, value in by_event.items()}

    def __repr__(self) -> str:
        return f"<Machine {self.name} v{self.version}: {len(self.states)} states>"

    @property
    def initial(self) -> State:
        """The state every saga of this kind starts in."""
        return next(state for state in self.states if state.initial)

    @property
    def events(self) -> tuple[str, ...]:
        """Every event some transition accepts, in declaration order."""
        return tuple(dict.fromkeys(t.event for t in self.transitions))

    @property
    def state_names(self) -> tuple[str, ...]:
        """Every state name, in declaration order."""
        return tuple(state.name for state in self.states)

    def state(self, name: str) -> State:
        """The state called ``name``; :class:`KeyError` if there is none."""
        try:
            return self._states[name]
        except KeyError:
            msg = f"saga {self.name!r} has no state {name!r}; states: {', '.join(self._states)}"
            raise KeyError(msg) from None

    def origins(self, event: str) -> frozenset[str] | None:
        """Who may fire ``event``, as declared; ``None`` if the machine does not say."""
        return self.fired_by.get(event)

    def has_state(self, name: str) -> bool:
        """Whether ``name`` is a state of this machine."""
        return name in self._states

    def candidates(self, state: str, event: str) -> tuple[Transition, ...]:
        """The transitions ``event`` may take from ``state``, in the order they are tried."""
        return self._by_event.get((event, state), ())

    def decide(
        self,
        state: str,
        event: str,
        data: Mapping[str, Any] = _EMPTY,
        payload: Mapping[str, Any] = _EMPTY,
    ) -> Transition | None:
        """
        The transition ``event`` takes from ``state``, or ``None`` if it is absorbed.

        A terminal state absorbs (returns ``None`` for) every event except a
        compensation whose guard holds.  A non-terminal state that accepts no
        transition raises :class:`TransitionNotAllowed`, naming the guards
        that did not hold.  This function is pure: it reads nothing but its
        arguments.
        """
        current = self._states.get(state)
        if current is None:
            raise TransitionNotAllowed(state=state, event=event, reason="unknown state")
        if event not in self.events:
            raise TransitionNotAllowed(
                state=state, event=event, reason=f"unknown event; events: {', '.join(self.events)}"
            )
        candidates = self.candidates(state, event)
        for transition in candidates:
            if transition.guard is None or transition.guard(data, payload):
                return transition
        if current.terminal:
            return None
        if candidates:
            failed = ", ".join(t.guard.name for t in candidates if t.guard is not None)
            reason = f"no guard holds ({failed})"
        else:
            reason = "no transition declared"
        raise TransitionNotAllowed(state=state, event=event, reason=reason)
