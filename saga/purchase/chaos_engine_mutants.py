"""
How a mutant patches the running process, and the engine's own guards broken on purpose.

:func:`swap` replaces a module's or class's attribute and :func:`sql_patch`
rewrites named queries; each checks that it changed what it means to change
(a target that moved raises :class:`MutantMissed`).  The mutants here break
the engine's guards (fencing, the inbox and the outbox, compare-and-set
transitions, the database's clock, timers, SQLite's write lock, the relay's
lease, ``SKIP LOCKED``); the purchase's own, and the table of every mutant
by name, are :mod:`saga.purchase.chaos_mutants`'s.  This is the one module
of the purchase that reaches into ``saga.core``: to break what it patches.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord
    from saga.core.store.sqlfiles import Dialect, Query, SqlComponent

DIALECTS: Final = ("postgres", "sqlite")


class MutantMissed(RuntimeError):
    """A mutant's target is not where it expected: it would test nothing."""


def swap(mutant: str, owner: object, name: str, new: object) -> Any:
    """Replace ``owner.name`` with ``new``; the old value (it must exist and be callable)."""
    old = getattr(owner, name, None)
    if not callable(old):
        msg = f"mutant {mutant}: {getattr(owner, '__name__', owner)!r}.{name} moved"
        raise MutantMissed(msg)
    setattr(owner, name, new)
    return old


def sql_patch(
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

    merged = swap(name, backend, "merged_queries", broken)


_LEASE: Final = (
    r"j\.lease_token = (i\.token|json_extract\(i\.value, '\$\.token'\))\s+AND j\.lease_until > "
    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))"
)


def no_fencing() -> None:
    """A worker whose lease expired completes its jobs anyway."""
    sql_patch(
        "no_fencing",
        {"fence_jobs": [(_LEASE, "true")], "archive_owned_jobs": [(_LEASE, "true")]},
        dialects=DIALECTS,
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

    swap("no_inbox_dedupe", inbox, "_to_observe", to_observe)
    sql_patch(
        "no_inbox_dedupe",
        {
            "claim_message": [
                (
                    r"ON CONFLICT \(source, event_id\) DO NOTHING",
                    "ON CONFLICT (source, event_id) DO UPDATE SET outcome = 'unmatched'",
                )
            ]
        },
        dialects=DIALECTS,
    )


def cas_without_version() -> None:
    """A transition moves the saga whatever version it was decided on (and without its lock)."""
    sql_patch(
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
    sql_patch(
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

    swap("timer_without_version", timers, "fire_timeout_in", fire_any_version)


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

    acquire = swap("sqlite_deferred_begin", sqlite_driver.SqlitePool, "acquire", deferred)


def relay_without_lease() -> None:
    """The relay claims events another relay holds, and marks them whatever its lease."""
    sql_patch(
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
        dialects=DIALECTS,
    )


def no_skip_locked() -> None:
    """Workers and relays wait for rows another one is claiming instead of skipping them."""
    skip = [(r"FOR UPDATE SKIP LOCKED", "FOR UPDATE")]
    sql_patch(
        "no_skip_locked",
        {"claim_jobs": skip, "claim_expired_jobs": skip, "claim_outbox": skip},
        dialects=("postgres",),
    )


def consumer_without_inbox() -> None:
    """A consumer applies an event id it already applied (a redelivery) again."""
    sql_patch(
        "consumer_without_inbox",
        {
            "claim_message": [
                (
                    r"ON CONFLICT \(source, event_id\) DO NOTHING",
                    "ON CONFLICT (source, event_id) DO UPDATE SET type = excluded.type",
                )
            ]
        },
        dialects=DIALECTS,
    )


def outbox_after_commit() -> None:
    """The outbox event is written in a transaction of its own, after the transition commits."""
    from saga.core.sagas import transitions as sagas  # noqa: PLC0415

    def split(tx: Tx, emits: Any, saga: SagaRecord) -> int:
        db = tx.db
        tx.after_commit(lambda: db.transaction(lambda later: emit_in(later, emits, saga)))
        return 0

    emit_in = swap("outbox_after_commit", sagas, "emit_in", split)
