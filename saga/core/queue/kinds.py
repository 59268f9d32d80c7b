"""Job kinds: what a worker runs for each kind of job, and how failures are treated."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from saga.core.queue.backoff import Backoff
from saga.exceptions import ConflictError, InvalidInput, NotFound
from steps.errors import ErrorClass, StepError

if TYPE_CHECKING:
    from saga.core.queue.values import Job
    from saga.core.store.db import Tx

T = TypeVar("T")

DEFAULT_TIMEOUT_SECONDS: Final = 300.0
# Errors that retrying cannot fix: bad data, a missing row, a refused transition.
_PERMANENT: Final = (InvalidInput, NotFound, ConflictError, ValueError, TypeError, KeyError)


def classify_error(exc: BaseException) -> ErrorClass:
    """
    The default classification of what a handler raised.

    A :class:`~steps.errors.StepError` says what it is; data errors and
    refused transitions are permanent; anything else (a dropped connection, a
    timeout before sending) is transient and retried with backoff.
    """
    if isinstance(exc, StepError):
        return exc.error_class
    if isinstance(exc, _PERMANENT):
        return "permanent"
    return "transient"


@dataclass(frozen=True, slots=True)
class Apply(Generic[T]):
    """
    A handler's request to finish inside the completion transaction.

    The worker locks the job, checks its lease, runs ``apply(tx)`` and marks
    the job done in one transaction: a database effect (a saga transition)
    is committed together with the completion, or not at all, and never by
    a worker that lost its lease.
    """

    apply: Callable[[Tx], T]


Handler = Callable[["Job"], Any]
UnknownHandler = Callable[["Tx", "Job", StepError], Any]


@dataclass(frozen=True, slots=True)
class JobKind:
    """
    One kind of job and its contract.

    A job runs at most ``max_attempts`` times, and never more than the
    attempts it was accepted with.

    Args:
        name: the ``kind`` stored on each job.
        handler: runs one job; returns a JSON-able result, or :class:`Apply`.
        queue: the queue its jobs go to (for ``saga stats`` and ``--queue``).
        max_attempts: attempts before a transient failure becomes a dead letter.
        backoff: delay between attempts (exponential, full jitter, capped).
        classify: maps an exception to ``transient``, ``permanent`` or ``unknown``.
        on_unknown: called in the completion transaction when the outcome is
            unknown (the saga opens a reconciliation item); without it the job
            becomes a dead letter of class ``unknown``, never a blind retry.
        timeout_seconds: how long one attempt may run.  Past it the
            heartbeat stops renewing the lease and the attempt fails as
            ``timed_out`` (retried, or a dead letter on the last attempt);
            whatever the handler does afterwards is refused by fencing.

    """

    name: str
    handler: Handler
    queue: str = "default"
    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    classify: Callable[[BaseException], ErrorClass] = classify_error
    on_unknown: UnknownHandler | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            msg = f"max_attempts of {self.name!r} must be at least 1"
            raise ValueError(msg)
        if not self.timeout_seconds > 0:
            msg = f"timeout_seconds of {self.name!r} must be positive"
            raise ValueError(msg)

    def last_attempt(self, job: Job) -> bool:
        """Whether a failure of ``job`` now exhausts its attempts (the job's or the kind's)."""
        return job.attempt >= min(job.max_attempts, self.max_attempts)


@dataclass(frozen=True, slots=True)
class Step:
    """
    How one action of a saga runs: its handler and its contract.

    Registered with a machine (``Registry.register(machine, steps={"action":
    Step(handler)})``), it becomes the job kind ``<saga>.<action>`` on the
    queue ``<saga>``, queued in the transaction that enters a state listing
    the action.  The options are :class:`JobKind`'s.
    """

    handler: Handler
    _: KW_ONLY
    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    classify: Callable[[BaseException], ErrorClass] = classify_error
    on_unknown: UnknownHandler | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def kind(self, saga: str, action: str) -> JobKind:
        """The job kind running this step for ``saga``'s ``action``."""
        return JobKind(
            f"{saga}.{action}",
            self.handler,
            queue=saga,
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            classify=self.classify,
            on_unknown=self.on_unknown,
            timeout_seconds=self.timeout_seconds,
        )


class Handlers:
    """The job kinds a worker can run, by name."""

    def __init__(self, kinds: Iterable[JobKind] = ()) -> None:
        self._kinds: dict[str, JobKind] = {}
        for kind in kinds:
            self.add(kind)

    def add(self, kind: JobKind) -> JobKind:
        """Register ``kind``; a name registered twice is an error."""
        if kind.name in self._kinds:
            msg = f"job kind {kind.name!r} is already registered"
            raise ValueError(msg)
        self._kinds[kind.name] = kind
        return kind

    def __getitem__(self, name: str) -> JobKind:
        return self._kinds[name]

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[JobKind]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    def names(self, queues: Iterable[str] | None = None) -> list[str]:
        """The kind names, optionally only those of ``queues``."""
        wanted = None if queues is None else set(queues)
        return sorted(k.name for k in self._kinds.values() if wanted is None or k.queue in wanted)

    def merged(self, other: Handlers) -> Handlers:
        """A new registry with the kinds of both (names must not collide)."""
        return Handlers([*self, *other])


def error_text(exc: BaseException) -> str:
    """``ClassName: message``, as stored in ``last_error``."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
