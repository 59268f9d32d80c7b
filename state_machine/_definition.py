"""Definition objects of a saga: states, transitions, guards, timeouts."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}", re.ASCII)

PREVIOUS_STATE: Final = "_previous_state"
"""
Key of the saga's data where the runtime keeps the state the saga was in
before its current one, so guards can tell where it came from.  Keys that
start with ``_`` belong to the engine.
"""

GuardCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]

# Who may fire an event (``Machine(fired_by={event: origins})``).  The runtime
# says which door an event came through; the machine says which doors it may.
OPERATOR: Final = "operator"
"""An operator's event: ``saga instances fire|cancel``, the Python API on their behalf."""
ROUTE: Final = "route"
"""A message from outside matched by an inbox route (a webhook, ``saga messages deliver``)."""
STEP: Final = "step"
"""The application's own code: its steps, hooks and jobs (``fire_in``, ``engine.sagas.fire``)."""
TIMER: Final = "timer"
"""A state's timeout, fired by a worker when its deadline passes."""
RECONCILIATION: Final = "reconciliation"
"""The reconciliation queue: the automatic checker, or ``saga recon resolve`` after its judge."""
ORIGINS: Final = (OPERATOR, ROUTE, STEP, TIMER, RECONCILIATION)
"""Every origin, in the order messages list them."""


def is_name(value: str) -> bool:
    """Whether ``value`` is a valid state, event, guard or action name."""
    return bool(_NAME.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Guard:
    """
    A named, pure predicate over the saga's data and the event's payload.

    Guards decide between transitions that share an event and a source; they
    must not do I/O (the runtime evaluates them inside a transaction, and the
    property tests evaluate them millions of times).
    """

    name: str
    check: GuardCheck = field(compare=False)
    description: str = ""

    def __call__(self, data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
        return bool(self.check(data, payload))

    def __invert__(self) -> Guard:
        check = self.check
        return Guard(
            name=f"not_{self.name}",
            check=lambda data, payload: not check(data, payload),
            description=f"not ({self.description or self.name})",
        )


def guard(check: GuardCheck) -> Guard:
    """Turn a function into a :class:`Guard` named after it."""
    doc = (check.__doc__ or "").strip().splitlines()
    return Guard(name=check.__name__, check=check, description=doc[0] if doc else "")


@dataclass(frozen=True, slots=True)
class Timeout:
    """
    An event fired when a state has lasted too long.

    The deadline is ``seconds`` (or the number of seconds found in the saga's
    data under ``seconds_from``) after the state was entered, or after the saga
    was created when ``since="created"``.  The runtime computes it with the
    database clock and stores it as a row that workers fire.
    """

    event: str
    seconds: float | None = None
    seconds_from: str | None = None
    since: Literal["entered", "created"] = "entered"

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.seconds_from is None):
            msg = "a Timeout needs exactly one of seconds= or seconds_from="
            raise ValueError(msg)
        if self.since not in ("entered", "created"):
            msg = f"Timeout.since must be 'entered' or 'created', not {self.since!r}"
            raise ValueError(msg)

    def duration(self, data: Mapping[str, Any]) -> float:
        """The timeout in seconds for a saga holding ``data``."""
        if self.seconds is not None:
            return float(self.seconds)
        key = self.seconds_from or ""
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            msg = (
                f"timeout {self.event!r} reads its duration from data[{key!r}], "
                f"which must be a positive number, not {value!r}"
            )
            raise ValueError(msg)
        return float(value)

    def describe(self) -> str:
        """A short text for diagrams: ``hold_expired after hold_seconds since created``."""
        amount = f"{self.seconds:g}s" if self.seconds is not None else str(self.seconds_from)
        return f"{self.event} after {amount} since {self.since}"


@dataclass(frozen=True, slots=True)
class State:
    """
    One state of a saga.

    ``actions`` name the steps the runtime queues, in the transition's own
    transaction, whenever the saga enters this state.  ``meta`` is domain data
    the engine does not interpret itself (the purchase saga says there which
    states hold a seat); a value of ``None`` means "unchanged from the previous
    state".
    """

    name: str
    initial: bool = False
    terminal: bool = False
    timeout: Timeout | None = None
    actions: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))


@dataclass(frozen=True, slots=True, init=False)
class Transition:
    """
    ``event`` moves a saga from any of ``source`` to ``target`` if ``guard`` holds.

    Transitions sharing an event and a source are tried in declaration order;
    the first whose guard holds wins.  A transition leaving a terminal state
    must say ``compensation=True``: terminal states absorb every other event.
    """

    event: str
    source: tuple[str, ...]
    target: str
    guard: Guard | None
    compensation: bool
    description: str

    def __init__(
        self,
        event: str,
        *,
        source: str | Iterable[str],
        target: str,
        guard: Guard | None = None,
        compensation: bool = False,
        description: str = "",
    ) -> None:
        sources = (source,) if isinstance(source, str) else tuple(source)
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "source", sources)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "guard", guard)
        object.__setattr__(self, "compensation", compensation)
        object.__setattr__(self, "description", description)

    @property
    def label(self) -> str:
        """``event [guard]``, as diagrams and error messages show it."""
        return f"{self.event} [{self.guard.name}]" if self.guard else self.event
