"""Checks run when a :class:`~state_machine.Machine` is built."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

from state_machine._definition import ORIGINS, TIMER, Guard, State, Timeout, Transition, is_name

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


def problems(
    name: str, version: int, states: Sequence[State], transitions: Sequence[Transition]
) -> list[str]:
    """Every reason the definition is invalid, in a stable order; empty if valid."""
    found: list[str] = []
    if not is_name(name):
        found.append(f"saga name {name!r} must match [a-z][a-z0-9_]* (at most 63 characters)")
    if isinstance(version, bool) or version < 1:
        found.append(f"version must be a whole number >= 1, not {version!r}")
    found += _state_problems(states)
    known = {state.name for state in states}
    found += _transition_problems(states, transitions, known)
    if found:
        # The graph checks below assume names resolve; stop at the first layer.
        return found
    found += _graph_problems(states, transitions)
    return found


def origin_problems(
    states: Sequence[State],
    transitions: Sequence[Transition],
    fired_by: Mapping[str, frozenset[str]],
) -> list[str]:
    """What is wrong with ``fired_by``: an unknown event or origin, a timeout no timer may fire."""
    found: list[str] = []
    events = {transition.event for transition in transitions}
    for event, origins in fired_by.items():
        if event not in events:
            found.append(f"fired_by names {event!r}, which no transition accepts")
        if not origins:
            found.append(f"fired_by gives {event!r} no origin: nothing could ever fire it")
        for origin in sorted(origins - set(ORIGINS)):
            found.append(
                f"fired_by gives {event!r} the unknown origin {origin!r}; "
                f"origins: {', '.join(ORIGINS)}"
            )
    for state in states:
        timer = fired_by.get(state.timeout.event) if state.timeout is not None else None
        if state.timeout is not None and timer is not None and TIMER not in timer:
            found.append(
                f"timeout event {state.timeout.event!r} of state {state.name!r} "
                "must be fireable by 'timer' (fired_by)"
            )
    return found


def _state_problems(states: Sequence[State]) -> list[str]:
    found: list[str] = []
    if not states:
        return ["a saga needs at least one state"]
    seen: set[str] = set()
    for state in states:
        if not is_name(state.name):
            found.append(f"state name {state.name!r} must match [a-z][a-z0-9_]*")
        if state.name in seen:
            found.append(f"duplicate state name {state.name!r}")
        seen.add(state.name)
        if state.initial and state.terminal:
            found.append(f"state {state.name!r} cannot be both initial and terminal")
        if state.terminal and state.timeout is not None:
            found.append(f"terminal state {state.name!r} cannot have a timeout")
        found += _action_problems(state)
        if state.timeout is not None:
            found += _timeout_value_problems(state.name, state.timeout)
    initials = [state.name for state in states if state.initial]
    if len(initials) != 1:
        found.append(f"exactly one state must be initial, found {len(initials)}: {initials}")
    if not any(state.terminal for state in states):
        found.append("at least one state must be terminal")
    return found


def _action_problems(state: State) -> list[str]:
    found: list[str] = []
    for action in state.actions:
        if not is_name(action):
            found.append(f"action {action!r} of state {state.name!r} must match [a-z][a-z0-9_]*")
    duplicates = sorted({a for a in state.actions if state.actions.count(a) > 1})
    if duplicates:
        found.append(f"state {state.name!r} queues {duplicates} more than once")
    return found


def _timeout_value_problems(state: str, timeout: Timeout) -> list[str]:
    found: list[str] = []
    if not is_name(timeout.event):
        found.append(f"timeout event {timeout.event!r} of state {state!r} is not a valid name")
    if timeout.seconds is not None and not timeout.seconds > 0:
        found.append(f"timeout of state {state!r} must be positive, not {timeout.seconds}")
    return found


def _transition_problems(
    states: Sequence[State], transitions: Sequence[Transition], known: set[str]
) -> list[str]:
    found: list[str] = []
    by_name = {state.name: state for state in states}
    seen: set[tuple[str, str, str | None]] = set()
    guards: dict[str, Guard] = {}
    for transition in transitions:
        where = f"transition {transition.label!r}"
        if not is_name(transition.event):
            found.append(f"{where}: event name must match [a-z][a-z0-9_]*")
        if not transition.source:
            found.append(f"{where}: needs at least one source state")
        for source in _unknown(transition.source, known):
            found.append(f"{where}: unknown source state {source!r}")
        if transition.target not in known:
            found.append(f"{where}: unknown target state {transition.target!r}")
        if transition.guard is not None:
            found += _guard_problems(transition.guard, guards, where)
        for source in transition.source:
            key = (transition.event, source, transition.guard.name if transition.guard else None)
            if key in seen:
                found.append(f"duplicate transition {transition.label!r} from {source!r}")
            seen.add(key)
            state = by_name.get(source)
            if state is not None and state.terminal and not transition.compensation:
                found.append(
                    f"{where} leaves terminal state {source!r}: mark it compensation=True "
                    "or remove it (terminal states absorb every other event)"
                )
    found += _shadow_problems(transitions)
    found += _timeout_transition_problems(states, transitions)
    return found


def _guard_problems(guard: Guard, guards: dict[str, Guard], where: str) -> list[str]:
    if not is_name(guard.name):
        return [f"{where}: guard name {guard.name!r} must match [a-z][a-z0-9_]*"]
    other = guards.setdefault(guard.name, guard)
    if other.check is not guard.check:
        return [f"{where}: two different guards are both named {guard.name!r}"]
    return []


def _shadow_problems(transitions: Sequence[Transition]) -> list[str]:
    found: list[str] = []
    unguarded: dict[tuple[str, str], Transition] = {}
    for transition in transitions:
        for source in transition.source:
            earlier = unguarded.get((transition.event, source))
            if earlier is not None:
                found.append(
                    f"transition {transition.label!r} from {source!r} can never happen: "
                    f"the unguarded {earlier.label!r} before it always wins"
                )
            elif transition.guard is None:
                unguarded[(transition.event, source)] = transition
    return found


def _timeout_transition_problems(
    states: Sequence[State], transitions: Sequence[Transition]
) -> list[str]:
    found: list[str] = []
    for state in states:
        if state.timeout is None:
            continue
        if not any(t.event == state.timeout.event and state.name in t.source for t in transitions):
            found.append(
                f"timeout event {state.timeout.event!r} of state {state.name!r} "
                "has no transition from that state"
            )
    return found


def _graph_problems(states: Sequence[State], transitions: Sequence[Transition]) -> list[str]:
    found: list[str] = []
    forward: dict[str, set[str]] = defaultdict(set)
    backward: dict[str, set[str]] = defaultdict(set)
    for transition in transitions:
        for source in transition.source:
            forward[source].add(transition.target)
            backward[transition.target].add(source)
    initial = next(state.name for state in states if state.initial)
    reachable = _walk([initial], forward)
    can_finish = _walk([state.name for state in states if state.terminal], backward)
    for state in states:
        if state.name not in reachable:
            found.append(f"state {state.name!r} is unreachable from {initial!r}")
        if state.terminal:
            continue
        if not forward[state.name]:
            found.append(
                f"non-terminal state {state.name!r} has no way out "
                "(no transition leaves it, and no timeout)"
            )
        elif state.name not in can_finish:
            found.append(f"no terminal state can be reached from {state.name!r}")
    return found


def _walk(start: Iterable[str], edges: dict[str, set[str]]) -> set[str]:
    seen = set(start)
    queue = deque(seen)
    while queue:
        for nxt in edges[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def _unknown(names: Iterable[str], known: set[str]) -> list[str]:
    return [name for name in names if name not in known]
