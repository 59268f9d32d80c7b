"""
The console's operators: accounts, passwords, sessions.

An operator is created from the command line (``saga operator add``) with a
role: ``viewer`` reads, ``operator`` also acts.  Passwords are hashed with
argon2id (``argon2-cffi``, in the ``web`` extra) and never stored or logged.
A session is a random token held by the browser; the database keeps only its
SHA-256, the session's CSRF token, and its expiry, judged by the database
clock: at most :data:`SESSION_LIFETIME_S` after sign-in and
:data:`SESSION_IDLE_S` after the last request.  Disabling an operator ends
their sessions at once.

Sign-in is throttled per name and per client address (:class:`Throttle`):
every attempt is a row of ``sign_in_attempts``, committed before the
failures of the window are counted by the database clock, so every console
process shares the count and concurrent attempts see each other.  Past the
limit the password is not even checked: the right one is refused too, until
the window has passed.  The rows are the audit (``saga operator sign-ins``,
the console's sign-ins page); ``saga prune`` removes old ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga import validation
from saga.core.logs import get_logger
from saga.exceptions import ConflictError, InvalidInput, NotFound, SagaError

if TYPE_CHECKING:
    import builtins

    from saga.core.store.db import Database

log = get_logger(__name__)

ROLES: Final = ("viewer", "operator")
SIGN_IN_OUTCOMES: Final = ("pending", "accepted", "refused", "throttled")
MIN_PASSWORD_LENGTH: Final = 12
SESSION_LIFETIME_S: Final = 8 * 3600.0
SESSION_IDLE_S: Final = 30 * 60.0
THROTTLE_WINDOW_S: Final = 15 * 60.0
KEPT_CHARS: Final = 64


class OperatorExists(ConflictError):
    """An operator of that name exists already; nothing was changed."""

    def __init__(self, *, name: str) -> None:
        self.name = name
        super().__init__(f"operator {name!r} exists already")
        self._kwargs = {"name": name}


class SignInThrottled(SagaError):
    """Too many failed sign-ins for this name or address in the window; nothing was checked."""

    def __init__(self, *, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(
            "too many failed sign-ins for this name or from this address; "
            f"try again in {int(retry_after_s // 60)} minutes"
        )
        self._kwargs = {"retry_after_s": retry_after_s}


@dataclass(frozen=True, slots=True)
class Throttle:
    """
    How many failed sign-ins a window allows, per name and per client address.

    Failures (and attempts being checked) count; accepted ones do not.  The
    address limit is higher: behind a proxy every operator shares one.
    """

    window_s: float = THROTTLE_WINDOW_S
    per_operator: int = 10
    per_address: int = 30


@dataclass(frozen=True, slots=True)
class Operator:
    """Someone who may sign in to the console."""

    name: str
    role: str
    disabled: bool = False

    @property
    def may_act(self) -> bool:
        """Whether the role allows changes (assign, resolve, replay)."""
        return self.role == "operator" and not self.disabled

    def to_json(self) -> dict[str, Any]:
        """The operator as plain data (never the hash)."""
        return {"name": self.name, "role": self.role, "disabled": self.disabled}


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in operator, as one request sees them."""

    operator: Operator
    csrf: str


def _hasher() -> Any:
    from argon2 import PasswordHasher  # noqa: PLC0415 - the web extra, only when needed

    return PasswordHasher()


_decoy_lock = threading.Lock()
_decoy: list[str] = []


def _decoy_hash(hasher: Any) -> str:
    """
    A hash to check a password against when the name is unknown (one per process).

    A wrong name then costs one verification, as a wrong password does: the
    time of an answer does not tell which names exist.
    """
    with _decoy_lock:
        if not _decoy:
            _decoy.append(hasher.hash(secrets.token_hex(16)))
        return _decoy[0]


class Operators:
    """Accounts and sessions in the engine's database."""

    def __init__(self, db: Database, *, throttle: Throttle | None = None) -> None:
        self.db = db
        self.throttle = throttle or Throttle()

    def prepare(self) -> None:
        """Compute the decoy hash now, so that the first unknown name is not slower."""
        _decoy_hash(_hasher())

    def add(self, name: str, *, role: str, password: str) -> Operator:
        """A new operator; :class:`OperatorExists` if the name is taken."""
        name = validation.identifier("name", name)
        role = validation.one_of("role", role, ROLES)
        _check_password(password)
        hashed = _hasher().hash(password)
        row = self.db.transaction(
            lambda tx: tx.one("insert_operator", name=name, role=role, password_hash=hashed)
        )
        if row is None:
            raise OperatorExists(name=name)
        log.info("operator_added", operator=name, role=role)
        return Operator(name, role)

    def list(self) -> list[Operator]:
        """Every operator, by name."""
        rows = self.db.transaction(lambda tx: tx.all("list_operators"), write=False)
        return [Operator(r["name"], r["role"], r["disabled_at"] is not None) for r in rows]

    def disable(self, name: str) -> None:
        """The operator can no longer sign in; their sessions end now."""
        name = validation.identifier("name", name)

        def work(tx: Any) -> None:
            if tx.one("get_operator", name=name) is None:
                raise NotFound(kind="operator", key=name)
            tx.run("disable_operator", name=name)
            tx.run("delete_operator_sessions", name=name)

        self.db.transaction(work)
        log.info("operator_disabled", operator=name)

    def sign_in(
        self, name: str, password: str, *, address: str | None = None
    ) -> tuple[str, Session] | None:
        """
        A new session's token and the session; ``None`` for a wrong name or password.

        :class:`SignInThrottled` past the throttle's limit for ``name`` or
        ``address`` (the client's), whatever the password.
        """
        attempt = self._admit(_kept(name), _kept(address or "unknown"))
        signed = self._check(name, password)
        self.db.transaction(
            lambda tx: tx.run(
                "settle_sign_in_attempt",
                id=attempt,
                outcome="refused" if signed is None else "accepted",
            )
        )
        return signed

    def _admit(self, name: str, address: str) -> int:
        """The attempt's row, or :class:`SignInThrottled` (audited) past the limit."""
        # Committed first, then counted: of N concurrent attempts, the k-th to
        # commit counts at least k, so at most the limit reach the password.
        attempt = int(
            self.db.transaction(
                lambda tx: tx.scalar("insert_sign_in_attempt", operator=name, address=address)
            )
        )
        limits = self.throttle

        def judge(tx: Any) -> bool:
            seen = tx.one(
                "count_sign_in_failures",
                operator=name,
                address=address,
                window_seconds=limits.window_s,
            )
            over = seen["by_operator"] > limits.per_operator or (
                seen["by_address"] > limits.per_address
            )
            if not over:
                return False
            counted = tx.one(
                "count_throttled_sign_in",
                operator=name,
                address=address,
                window_seconds=limits.window_s,
            )
            if counted is None:
                tx.run("settle_sign_in_attempt", id=attempt, outcome="throttled")
            else:
                tx.run("delete_pending_sign_in_attempt", id=attempt)
            return True

        if self.db.transaction(judge):
            log.warning("sign_in_throttled", operator=name, address=address)
            raise SignInThrottled(retry_after_s=limits.window_s)
        return attempt

    def attempts(
        self, *, outcome: str | None = None, limit: int = 200
    ) -> builtins.list[dict[str, Any]]:
        """The latest sign-in attempts, newest first (``outcome`` to keep one kind)."""
        if outcome is not None:
            outcome = validation.one_of("outcome", outcome, SIGN_IN_OUTCOMES)
        rows = self.db.transaction(
            lambda tx: tx.all("list_sign_in_attempts", outcome=outcome, limit=limit), write=False
        )
        return [dict(row) for row in rows]

    def _check(self, name: str, password: str) -> tuple[str, Session] | None:
        from argon2.exceptions import VerificationError  # noqa: PLC0415

        hasher = _hasher()
        row = None
        if _plausible(name):
            row = self.db.transaction(lambda tx: tx.one("get_operator", name=name), write=False)
        if row is None or row["disabled_at"] is not None:
            with contextlib.suppress(VerificationError):
                hasher.verify(_decoy_hash(hasher), password)
            log.warning("sign_in_refused", operator=name[:64])
            return None
        try:
            hasher.verify(row["password_hash"], password)
        except VerificationError:
            log.warning("sign_in_refused", operator=name)
            return None
        if hasher.check_needs_rehash(row["password_hash"]):
            rehashed = hasher.hash(password)
            self.db.transaction(
                lambda tx: tx.run("set_operator_password", name=name, password_hash=rehashed)
            )
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.db.transaction(
            lambda tx: tx.run(
                "insert_console_session",
                token_hash=_digest(token),
                operator=name,
                csrf=csrf,
                lifetime_seconds=SESSION_LIFETIME_S,
            )
        )
        log.info("signed_in", operator=name)
        return token, Session(Operator(name, row["role"]), csrf)

    def session(self, token: str | None) -> Session | None:
        """The live session behind a browser's token (refreshing its idle time), or ``None``."""
        if not token:
            return None
        row = self.db.transaction(
            lambda tx: tx.one(
                "touch_console_session", token_hash=_digest(token), idle_seconds=SESSION_IDLE_S
            )
        )
        if row is None:
            return None
        return Session(Operator(row["operator"], row["role"]), row["csrf"])

    def sign_out(self, token: str | None) -> None:
        """End the session (and sweep expired ones)."""
        if not token:
            return

        def work(tx: Any) -> None:
            tx.run("delete_console_session", token_hash=_digest(token))
            tx.run("delete_expired_console_sessions")

        self.db.transaction(work)


def _check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(
            field="password", problem=f"must be at least {MIN_PASSWORD_LENGTH} characters"
        )
    if password.strip() != password:
        raise InvalidInput(field="password", problem="must not start or end with white space")


def _plausible(name: str) -> bool:
    try:
        validation.identifier("name", name)
    except InvalidInput:
        return False
    return True


def _kept(text: str) -> str:
    """What the audit keeps of text typed by anyone: 64 characters, control ones as ``?``."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:KEPT_CHARS])


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
