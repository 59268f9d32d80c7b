"""Retry policy of a job kind: bounded attempts, exponential backoff, full jitter."""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import wait_random_exponential


class _Attempt:
    """The one attribute of tenacity's RetryCallState that its wait strategies read."""

    __slots__ = ("attempt_number",)

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


@dataclass(frozen=True, slots=True)
class Backoff:
    """
    Delay before the next attempt: uniform in ``[0, min(cap, base * 2**(attempt-1))]``.

    Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"),
    computed by tenacity's ``wait_random_exponential``: retries of many jobs
    that failed together spread out instead of hitting a recovering
    dependency in waves.  The delay is persisted as the job's
    ``available_at``; nothing sleeps while holding a transaction.
    """

    base: float = 1.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        if not self.base > 0:
            msg = f"Backoff.base must be positive, not {self.base}"
            raise ValueError(msg)
        if self.cap < self.base:
            msg = f"Backoff.cap ({self.cap}) must be at least base ({self.base})"
            raise ValueError(msg)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            msg = f"attempt numbers start at 1, not {attempt}"
            raise ValueError(msg)
        strategy = wait_random_exponential(multiplier=self.base, max=self.cap)
        return float(strategy(_Attempt(attempt)))  # type: ignore[arg-type]
