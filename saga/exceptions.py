"""
The engine's exception tree.

Everything the engine raises on purpose derives from :class:`SagaError`.  The
CLI maps the branches to exit codes: :class:`InvalidInput` → 2,
:class:`ConflictError` → 3, :class:`NotFound` → 4, anything else → 1.  A
step raises :class:`StepError`'s three to say what may happen next
(:class:`TransientError`, :class:`PermanentError`, :class:`OutcomeUnknown`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from state_machine.errors import ConflictError, DefinitionError, SagaError, TransitionNotAllowed
from steps.errors import OutcomeUnknown, PermanentError, StepError, TransientError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ApplicationError",
    "ApplicationLoadFailed",
    "BrokerUnavailable",
    "ConflictError",
    "DatabaseBusy",
    "DatabaseError",
    "DatabaseMissing",
    "DatabaseUnavailable",
    "DefinitionError",
    "DuplicatePurchase",
    "EventRefused",
    "IdempotencyConflict",
    "InvalidInput",
    "JobConflict",
    "LeaseLost",
    "NotFound",
    "OutcomeUnknown",
    "PermanentError",
    "ProviderUnavailable",
    "PublishFailed",
    "SagaError",
    "SchemaOutOfDate",
    "SeatUnavailable",
    "SoldOut",
    "StepError",
    "TransientError",
    "TransitionNotAllowed",
    "VersionConflict",
]


class ApplicationError(DefinitionError):
    """An application cannot run as declared; ``problems`` lists every finding."""

    def __init__(self, *, application: str, problems: Sequence[str]) -> None:
        self.application = application
        self.machine = application
        self.problems = tuple(problems)
        listing = "\n".join(f"  - {problem}" for problem in self.problems)
        SagaError.__init__(self, f"invalid application {application!r}:\n{listing}")
        self._kwargs = {"application": application, "problems": self.problems}


class EventRefused(ConflictError):
    """
    The event came through a door its machine does not open to it; nothing changed.

    ``origin`` is the door it came through (``operator``, ``route``…),
    ``allowed`` the origins the machine declares for it, ``instead`` the
    way it is fired (``saga recon resolve …`` for a reconciliation outcome).
    """

    def __init__(
        self,
        *,
        saga_id: str,
        kind: str,
        event: str,
        origin: str,
        allowed: Sequence[str],
        instead: str,
    ) -> None:
        self.saga_id = saga_id
        self.kind = kind
        self.event = event
        self.origin = origin
        self.allowed = tuple(allowed)
        self.instead = instead
        super().__init__(
            f"refusing {event!r} on {kind} {saga_id} from {origin}: only "
            f"{' or '.join(self.allowed)} may fire it; {instead} (the refusal is recorded)"
        )
        self._kwargs = {
            "saga_id": saga_id,
            "kind": kind,
            "event": event,
            "origin": origin,
            "allowed": self.allowed,
            "instead": instead,
        }


class InvalidInput(SagaError, ValueError):
    """A value given by the caller is malformed; ``field`` names it."""

    def __init__(self, *, field: str, problem: str, value: object = None) -> None:
        self.field = field
        self.problem = problem
        self.value = value
        super().__init__(f"{field}: {problem}")
        self._kwargs = {"field": field, "problem": problem, "value": value}


class ApplicationLoadFailed(InvalidInput):
    """
    The user's code raised while ``--app`` was loaded (its module or its factory).

    ``traceback`` is that error's traceback, for the user to read: the error is
    in their code, and the message alone would not say where.
    """

    def __init__(self, *, spec: str, error: str, traceback: str) -> None:
        self.spec = spec
        self.error = error
        self.traceback = traceback
        super().__init__(field="app", problem=f"could not load application {spec!r}: {error}")
        self._kwargs = {"spec": spec, "error": error, "traceback": traceback}


class NotFound(SagaError, LookupError):
    """Nothing of that kind is stored under that id."""

    def __init__(self, *, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"{kind} {key!r} not found")
        self._kwargs = {"kind": kind, "key": key}


class IdempotencyConflict(ConflictError):
    """An operation id was reused with another payload; nothing was changed."""

    def __init__(self, *, operation_id: str, saga_id: str) -> None:
        self.operation_id = operation_id
        self.saga_id = saga_id
        super().__init__(
            f"operation id {operation_id!r} was already used with another payload "
            f"(saga {saga_id}); nothing was changed"
        )
        self._kwargs = {"operation_id": operation_id, "saga_id": saga_id}


class JobConflict(ConflictError):
    """A job id was reused with another kind or payload; nothing was changed."""

    def __init__(self, *, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} already exists with another kind or payload")
        self._kwargs = {"job_id": job_id}


class LeaseLost(ConflictError):
    """The job's lease was lost before its transaction ended; that transaction rolled back."""

    def __init__(self, *, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"the lease on job {job_id} expired or passed to another worker before the "
            "transaction ended; nothing it wrote was kept"
        )
        self._kwargs = {"job_id": job_id}


class VersionConflict(ConflictError):
    """The saga moved on since it was read; the change was not applied."""

    def __init__(self, *, saga_id: str, expected_version: int, actual_version: int | None) -> None:
        self.saga_id = saga_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        super().__init__(
            f"saga {saga_id} is at version {actual_version}, not {expected_version}: "
            "it changed since it was read; nothing was applied"
        )
        self._kwargs = {
            "saga_id": saga_id,
            "expected_version": expected_version,
            "actual_version": actual_version,
        }


class SeatUnavailable(ConflictError):
    """A seat counter would leave its bounds: no free seat, or none held to release."""

    def __init__(self, *, intensive_id: str, reason: str) -> None:
        self.intensive_id = intensive_id
        self.reason = reason
        super().__init__(f"intensive {intensive_id!r}: {reason}")
        self._kwargs = {"intensive_id": intensive_id, "reason": reason}


class SoldOut(SeatUnavailable):
    """Every seat of the intensive is held or taken."""

    def __init__(
        self, *, intensive_id: str, reason: str = "sold out: every seat is held or taken"
    ) -> None:
        super().__init__(intensive_id=intensive_id, reason=reason)


class DuplicatePurchase(ConflictError):
    """The student already holds or has a seat of this intensive."""

    def __init__(self, *, intensive_id: str, student_id: str) -> None:
        self.intensive_id = intensive_id
        self.student_id = student_id
        super().__init__(
            f"student {student_id!r} already holds or has a seat of intensive {intensive_id!r}"
        )
        self._kwargs = {"intensive_id": intensive_id, "student_id": student_id}


class DatabaseError(SagaError):
    """The database refused a statement; ``sqlstate`` and ``constraint`` say why when known."""

    def __init__(
        self, message: str, *, sqlstate: str | None = None, constraint: str | None = None
    ) -> None:
        self.sqlstate = sqlstate
        self.constraint = constraint
        super().__init__(message)
        self._kwargs = {"message": message, "sqlstate": sqlstate, "constraint": constraint}


class DatabaseUnavailable(DatabaseError):
    """The database could not be reached."""


class DatabaseBusy(DatabaseError):
    """A lock stayed taken (or transactions kept conflicting) for the whole lock wait."""


class ProviderUnavailable(SagaError):
    """An outside service (the payment provider) gave no answer; nothing was decided or changed."""

    def __init__(self, *, operation: str, error: str) -> None:
        self.operation = operation
        self.error = error
        super().__init__(
            f"the provider did not answer ({operation}): {error}; nothing was changed, "
            "try again later"
        )
        self._kwargs = {"operation": operation, "error": error}


class DatabaseMissing(NotFound):
    """A read found no embedded database file at ``path``; it never creates one."""

    def __init__(self, *, path: str, field: str = "db") -> None:
        self.path = path
        self.field = field
        # The option naming that database: --db, or the application's (its field, dashed).
        option = "--" + field.replace("_", "-")
        SagaError.__init__(
            self,
            f"no database at {path} (check {option}; a read never creates one, "
            "`saga db upgrade` does)",
        )
        self.kind = "database"
        self.key = path
        self._kwargs = {"path": path, "field": field}


class SchemaOutOfDate(SagaError):
    """The database schema is older than this version of the engine; run ``saga db upgrade``."""

    def __init__(self, *, current: int, required: int, component: str = "engine") -> None:
        self.current = current
        self.required = required
        self.component = component
        whose = "the database schema is" if component == "engine" else f"the {component} tables are"
        super().__init__(
            f"{whose} at version {current}, this engine needs {required}: run `saga db upgrade`"
        )
        self._kwargs = {"current": current, "required": required, "component": component}


class PublishFailed(SagaError):
    """
    A publisher could not publish every event of a batch.

    ``confirmed`` are the ids the broker confirmed before the failure (a
    prefix of the batch, in order); ``reason`` says what went wrong;
    ``rejected`` is the id of the event the broker (or a subscriber) refused,
    ``None`` when the connection failed (an outage is never the event's fault).
    """

    def __init__(
        self, *, confirmed: Sequence[str], reason: str, rejected: str | None = None
    ) -> None:
        self.confirmed = tuple(confirmed)
        self.reason = reason
        self.rejected = rejected
        super().__init__(f"published {len(self.confirmed)} event(s), then: {reason}")
        self._kwargs = {"confirmed": self.confirmed, "reason": reason, "rejected": rejected}


class BrokerUnavailable(SagaError):
    """The message broker could not be reached; ``broker`` names it without its password."""

    def __init__(self, *, broker: str, error: str) -> None:
        self.broker = broker
        self.error = error
        super().__init__(f"the broker at {broker} is unreachable: {error}")
        self._kwargs = {"broker": broker, "error": error}
