"""
How an effect failed: the three outcomes a step or job handler can report.

A handler raises one of these (or lets the worker classify what it raised):
the worker retries :class:`TransientError` with backoff, dead-letters
:class:`PermanentError` at once, and never retries :class:`OutcomeUnknown`
blindly: an effect that may have happened goes to reconciliation.
"""

from __future__ import annotations

from typing import Any, Literal

from state_machine.errors import SagaError

ErrorClass = Literal["transient", "permanent", "unknown"]


class StepError(SagaError):
    """An effect did not succeed; subclasses say what the caller may do next."""

    error_class: ErrorClass = "transient"

    def __init__(self, message: str, *, evidence: dict[str, Any] | None = None) -> None:
        self.evidence = dict(evidence or {})
        super().__init__(message)
        self._kwargs = {"message": message, "evidence": self.evidence}


class TransientError(StepError):
    """It did not happen, and trying again later may work (timeout before sending, 503…)."""

    error_class: ErrorClass = "transient"


class PermanentError(StepError):
    """It did not happen, and trying again cannot help (bad input, declined, 4xx)."""

    error_class: ErrorClass = "permanent"


class OutcomeUnknown(StepError):
    """
    It may or may not have happened (a timeout after the request left).

    "Unknown" is not "failed": the caller must find out, never compensate
    or retry with a new key blindly.  ``evidence`` keeps what was sent and
    what came back, for the reconciliation item.
    """

    error_class: ErrorClass = "unknown"
