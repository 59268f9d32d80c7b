"""
The engine broken on purpose, one guard at a time: ``saga chaos --mutant NAME``.

A fault harness that never fails proves nothing; each mutant here removes
one guard the engine or the purchase relies on, so that a run can show it
notices.  :func:`apply` patches the running process (the harness applies it
to itself and to every worker process it starts); nothing else in the
package calls it, and a process that was never told to apply one runs the
engine as shipped.  Each patch checks that it changed what it means to
change: a mutant whose target moved fails loudly instead of testing nothing.

The tests' ``sitecustomize`` (``tests/chaos/broken``) applies the same
mutants by name from ``$SAGA_BROKEN_VARIANT``, for tests that run pytest or
another command under one.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord
    from saga.core.store.sqlfiles import Dialect, Query, SqlComponent

_DIALECTS: Final = ("postgres", "sqlite")


class MutantMissed(RuntimeError):
    """A mutant's target is not where it expected: it would test nothing."""


def _swap(mutant: str, owner: object, name: str, new: object) -> Any:
    """Replace ``owner.name`` with ``new``; the old value (it must exist and be callable)."""
    old = getattr(owner, name, None)
    if not callable(old):
        msg = f"mutant {mutant}: {getattr(owner, '__name__', owner)!r}.{name} moved"
        raise MutantMissed(msg)
    setattr(owner, name, new)
    return old


def _sql_patch(
    name: str, patches: Mapping[str, Sequence[tuple[str, str]]], *, dialects: Sequence[str]
) -> None:
    """Rewrite named queries: {query name: [(pattern, replacement)]}; each pattern must match."""
    from saga.core.store import backend  # noqa: PLC0415 - a mutant loads what it breaks

    merged: Callable[[Dialect, tuple[SqlComponent, ...]], dict[str, Query]]

    def broken(dialect: Dialect, components: tuple[SqlComponent, ...]) -> dict[str, Query]:
        queries = dict(merged(dialect, components))
        if dialect not in dialects:
            return queries
        for query, edits in patches.items():
            if query not in queries:
                continue  # another component's database
            sql = queries[query].sql
            for pattern, replacement in edits:
                sql, count = re.subn(pattern, replacement, sql)
                if count == 0:
                    msg = f"mutant {name}: {pattern!r} not in {query}"
                    raise MutantMissed(msg)
            queries[query] = dataclasses.replace(queries[query], sql=sql)
        return queries

    merged = _swap(name, backend, "merged_queries", broken)


_LEASE: Final = (
    r"j\.lease_token = (i\.token|json_extract\(i\.value, '\$\.token'\))\s+AND j\.lease_until > "
    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))"
)


def no_fencing() -> None:
    """A worker whose lease expired completes its jobs anyway."""
    _sql_patch(
        "no_fencing",
        {"fence_jobs": [(_LEASE, "true")], "archive_owned_jobs": [(_LEASE, "true")]},
        dialects=_DIALECTS,
    )


def no_inbox_dedupe() -> None:
    """
    The engine's inbox takes an event id it already has as if it were new.

    Both halves of the dedupe go: the read before the provider is asked
    (which would otherwise skip a known event) and the claim in the
    transaction of the event's effect.
    """
    from saga.core.messages import inbox  # noqa: PLC0415

    def to_observe(tx: Tx, route: Any, message: Any) -> Any:
        return route.correlate(tx, message)

    _swap("no_inbox_dedupe", inbox, "_to_observe", to_observe)
    _sql_patch(
        "no_inbox_dedupe",
        {
            "claim_message": [
                (
                    r"ON CONFLICT \(source, event_id\) DO NOTHING",
                    "ON CONFLICT (source, event_id) DO UPDATE SET outcome = 'unmatched'",
                )
            ]
        },
        dialects=_DIALECTS,
    )


_CHECK: Final = "intensives_seats_in_range"


def no_seat_guard() -> None:
    """Seats move without the capacity check (and PostgreSQL's table CHECK is dropped)."""
    _sql_patch(
        "no_seat_guard",
        {"move_seats": [(r"\s+AND held \+ taken \+ :held_delta \+ :taken_delta <= capacity", "")]},
        dialects=_DIALECTS,
    )
    from saga.core import engine as _engine  # noqa: PLC0415

    def upgrade_and_drop(self: Any) -> Any:
        result = upgrade(self)
        import sqlalchemy as sa  # noqa: PLC0415

        if self.db.dialect != "postgres":
            return result  # SQLite cannot drop a CHECK: there it still stops the oversell
        with self.db.engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE intensives DROP CONSTRAINT IF EXISTS {_CHECK}"))
        return result

    upgrade = _swap("no_seat_guard", _engine.Engine, "upgrade", upgrade_and_drop)

    _engine.Engine.upgrade = upgrade_and_drop  # type: ignore[method-assign]


def no_seat_release() -> None:
    """A purchase that ends without its seat (expired, cancelled, refunded) keeps it."""
    from saga.purchase import purchases  # noqa: PLC0415
    from state_machine.purchase import PURCHASE, SEAT_FREE  # noqa: PLC0415

    def keep_the_seat(
        self: Any, tx: Tx, before: SagaRecord, after: SagaRecord, change: Any
    ) -> None:
        if PURCHASE.state(after.state).meta.get("seat") == SEAT_FREE:
            return
        hook(self, tx, before, after, change)

    hook = _swap("no_seat_release", purchases.SeatHook, "on_transition", keep_the_seat)


def random_refund_key() -> None:
    """Each refund attempt mints a new key instead of reusing the one written."""
    from saga.purchase import steps  # noqa: PLC0415

    _swap("random_refund_key", steps, "refund_key", lambda key: f"refund:{uuid.uuid4().hex}")
    _sql_patch(
        "random_refund_key",
        {
            "record_refund_intent": [
                (
                    r"ON CONFLICT \(saga_id\) DO NOTHING",
                    "ON CONFLICT (saga_id) DO UPDATE SET key = excluded.key",
                )
            ]
        },
        dialects=_DIALECTS,
    )


def expiry_without_asking() -> None:
    """A hold expires without asking the provider whether the money arrived."""
    from saga.purchase import app, steps  # noqa: PLC0415

    def not_paid(db: Any, provider: Any, saga: Any, event: str) -> dict[str, Any]:
        del db, provider, saga
        if event == "hold_expired":
            return {"provider_status": "not_paid", "checked": "nobody asked"}
        return {}

    _swap("expiry_without_asking", steps, "hold_expiry_payload", not_paid)
    _swap("expiry_without_asking", app, "hold_expiry_payload", not_paid)


def cas_without_version() -> None:
    """A transition moves the saga whatever version it was decided on (and without its lock)."""
    _sql_patch(
        "cas_without_version",
        {
            "transition_saga": [(r"AND version = :version", "AND CAST(:version AS integer) > 0")],
            "lock_saga": [(r"\s+FOR UPDATE", "")],
        },
        dialects=("postgres",),
    )


def app_clock() -> None:
    """
    Leases, due times and the hold's deadline by the process's own clock, not the database's.

    The process's clock is ``time.time()``; where it disagrees with the
    machine's real time (a skewed clock, as ``saga chaos``'s ``skew_clocks``
    gives its workers), the queries judge by it.
    """
    offset = time.time() - time.clock_gettime(time.CLOCK_REALTIME)
    now = f"(clock_timestamp() + make_interval(secs => {offset:.3f}))"
    clock = r"WITH clock AS \(SELECT clock_timestamp\(\) AS now\)"
    own_clock = f"WITH clock AS (SELECT {now} AS now)"
    _sql_patch(
        "app_clock",
        {
            "record_payment_intent": [
                (r"deadline_at <= clock_timestamp\(\)", f"deadline_at <= {now}")
            ],
            "fence_jobs": [(r"j\.lease_until > clock_timestamp\(\)", f"j.lease_until > {now}")],
            "archive_owned_jobs": [
                (r"j\.lease_until > clock_timestamp\(\)\n", f"j.lease_until > {now}\n")
            ],
            "claim_jobs": [
                (clock, own_clock),
                (r"available_at <= clock_timestamp\(\)", f"available_at <= {now}"),
            ],
            "claim_expired_jobs": [
                (clock, own_clock),
                (r"lease_until < clock_timestamp\(\)", f"lease_until < {now}"),
            ],
        },
        dialects=("postgres",),
    )


def no_hold_deadline() -> None:
    """The payment intent is written even after the purchase's hold ran out."""
    _sql_patch(
        "no_hold_deadline",
        {
            "record_payment_intent": [
                (
                    r"WHERE NOT EXISTS \(SELECT 1 FROM sagas WHERE id = :saga_id AND deadline_at "
                    r"<= (clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))\)",
                    "WHERE CAST(:saga_id AS text) IS NOT NULL",
                )
            ]
        },
        dialects=_DIALECTS,
    )


def timer_without_version() -> None:
    """A timer fires its event on whatever version the saga is at, not the one it was set for."""
    from saga.core.sagas import timers  # noqa: PLC0415
    from saga.core.sagas.transitions import fire_in  # noqa: PLC0415

    def fire_any_version(
        tx: Tx,
        registry: Any,
        saga_id: str,
        *,
        version: int,
        event: str,
        payload: Mapping[str, Any],
    ) -> dict[str, Any]:
        fired = fire_in(
            tx,
            registry,
            saga_id,
            event,
            payload=payload,
            actor="timer",
            cause=f"deadline {event} of version {version}",
        )
        return {"fired": event, "state": fired.saga.state, "version": fired.saga.version}

    _swap("timer_without_version", timers, "fire_timeout_in", fire_any_version)


class _Deferred:
    """A SQLite connection whose ``BEGIN IMMEDIATE`` is a plain (deferred) ``BEGIN``."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def execute(self, sql: str, *args: Any) -> Any:
        return self._raw.execute("BEGIN" if sql == "BEGIN IMMEDIATE" else sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def sqlite_deferred_begin() -> None:
    """SQLite's writers begin deferred: the write lock is taken at the first write, not up front."""
    from saga.core.store import sqlite_driver  # noqa: PLC0415

    def deferred(self: Any) -> Any:
        conn = acquire(self)
        if not isinstance(conn.raw, _Deferred):
            conn.raw = _Deferred(conn.raw)
        return conn

    acquire = _swap("sqlite_deferred_begin", sqlite_driver.SqlitePool, "acquire", deferred)


def relay_without_lease() -> None:
    """The relay claims events another relay holds, and marks them whatever its lease."""
    _sql_patch(
        "relay_without_lease",
        {
            "claim_outbox": [
                (
                    r"AND \(o\.lease_until IS NULL OR o\.lease_until <= "
                    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))\)",
                    "",
                )
            ],
            "mark_outbox_published": [
                (
                    r"AND lease_token = :token AND lease_until > "
                    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))",
                    "AND CAST(:token AS text) IS NOT NULL",
                )
            ],
        },
        dialects=_DIALECTS,
    )


def no_skip_locked() -> None:
    """Workers and relays wait for rows another one is claiming instead of skipping them."""
    skip = [(r"FOR UPDATE SKIP LOCKED", "FOR UPDATE")]
    _sql_patch(
        "no_skip_locked",
        {"claim_jobs": skip, "claim_expired_jobs": skip, "claim_outbox": skip},
        dialects=("postgres",),
    )


def consumer_without_inbox() -> None:
    """A consumer applies an event id it already applied (a redelivery) again."""
    _sql_patch(
        "consumer_without_inbox",
        {
            "claim_message": [
                (
                    r"ON CONFLICT \(source, event_id\) DO NOTHING",
                    "ON CONFLICT (source, event_id) DO UPDATE SET type = excluded.type",
                )
            ]
        },
        dialects=_DIALECTS,
    )


def outbox_after_commit() -> None:
    """The outbox event is written in a transaction of its own, after the transition commits."""
    from saga.core.sagas import transitions as sagas  # noqa: PLC0415

    def split(tx: Tx, emits: Any, saga: SagaRecord) -> int:
        db = tx.db
        tx.after_commit(lambda: db.transaction(lambda later: emit_in(later, emits, saga)))
        return 0

    emit_in = _swap("outbox_after_commit", sagas, "emit_in", split)


# Each mutant, by name: the guard it removes (the backends it applies to).
MUTANTS: Final[dict[str, Callable[[], None]]] = {
    "no_inbox_dedupe": no_inbox_dedupe,
    "random_refund_key": random_refund_key,
    "expiry_without_asking": expiry_without_asking,
    "no_seat_guard": no_seat_guard,
    "no_seat_release": no_seat_release,
    "cas_without_version": cas_without_version,
    "no_fencing": no_fencing,
    "app_clock": app_clock,
    "no_hold_deadline": no_hold_deadline,
    "timer_without_version": timer_without_version,
    "sqlite_deferred_begin": sqlite_deferred_begin,
    "relay_without_lease": relay_without_lease,
    "no_skip_locked": no_skip_locked,
    "consumer_without_inbox": consumer_without_inbox,
    "outbox_after_commit": outbox_after_commit,
}
# Mutants of one backend's guard: a run on the other would test nothing.
ONLY_ON: Final = {
    "cas_without_version": "postgres",
    "app_clock": "postgres",
    "no_skip_locked": "postgres",
    "sqlite_deferred_begin": "sqlite",
}

_applied: list[str] = []


def apply(name: str) -> None:
    """Break this process's engine the way mutant ``name`` says (once per process)."""
    if name in _applied:
        return
    if name not in MUTANTS:
        msg = f"no mutant {name!r}; known: {', '.join(MUTANTS)}"
        raise ValueError(msg)
    MUTANTS[name]()
    _applied.append(name)
