"""
The root of the engine's one exception tree, and the errors of definitions.

The root lives here, in the lowest layer, because ``state_machine`` may import
nothing from ``saga``: putting :class:`SagaError` here lets every layer raise
errors that share one root.  ``saga.exceptions`` re-exports it and adds the
runtime's errors; users import from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence


def _rebuild(cls: type[SagaError], kwargs: dict[str, Any]) -> SagaError:
    return cls(**kwargs)


class SagaError(Exception):
    """
    Base class of every error the engine raises on purpose.

    Subclasses take keyword arguments, keep them as typed attributes and build
    their message from them; :meth:`__reduce__` replays those arguments, so an
    error raised in a worker process survives pickling to its parent.
    """

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self._kwargs = dict(kwargs)
        if message is not None:
            self._kwargs.setdefault("message", message)
        super().__init__(message or (type(self).__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self._kwargs))


class DefinitionError(SagaError):
    """A saga definition is invalid; ``problems`` lists every finding."""

    def __init__(self, *, machine: str, problems: Sequence[str]) -> None:
        self.machine = machine
        self.problems = tuple(problems)
        listing = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid definition of saga {machine!r}:\n{listing}")
        self._kwargs = {"machine": machine, "problems": self.problems}


class ConflictError(SagaError):
    """The request contradicts what is already stored."""


class TransitionNotAllowed(ConflictError):
    """No declared transition accepts this event in this state."""

    def __init__(self, *, state: str, event: str, reason: str | None = None) -> None:
        self.state = state
        self.event = event
        self.reason = reason
        text = f"event {event!r} is not allowed in state {state!r}"
        super().__init__(f"{text}: {reason}" if reason else text)
        self._kwargs = {"state": state, "event": event, "reason": reason}
