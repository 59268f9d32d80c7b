"""
The engine's own statements, captured in one run and replayed without it (bench/saga).

:class:`Recorder` listens to one engine database's SQLAlchemy events and keeps
every transaction it runs: its statements with their bound parameters, as the
driver got them, when it began and when it committed (``time.monotonic_ns``,
one clock for every process of the machine).  :func:`replay` runs them again on
a fresh database with plain psycopg, one connection per connection of the
capture, each in its own order, and a transaction starts only once every
transaction that had committed before it began in the capture has committed
again (so a completion never runs before the acceptance it completes).  No
engine code runs: what is left is the server's and the driver's cost of the
same statements, the floor the engine is compared with.  On SQLite, where
the engine runs its transactions on the stdlib driver (captured by
:meth:`Recorder.watch_pool`), :func:`replay_sqlite` runs them in a plain
``sqlite3`` loop.

Where claims race, the replay's ``SKIP LOCKED`` may pick other rows than the
capture did, and a later statement of that transaction may then change
nothing; such a replay does less work than the engine did, so the floor errs
high, against the engine.  Statements that fail are rolled back with their
transaction and counted.
"""

from __future__ import annotations

import bisect
import functools
import os
import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class Captured:
    """One transaction as the engine ran it."""

    stream: tuple[int, int]  # (process, driver connection)
    began: int
    ended: int = 0
    committed: bool = False
    statements: list[tuple[str, Any, bool]] = field(default_factory=list)  # sql, params, many
    write: bool = True  # on SQLite: opened BEGIN IMMEDIATE (a write) or BEGIN (a read)


class Recorder:
    """
    Keeps every transaction one database runs, while ``recording``.

    PostgreSQL's through its SQLAlchemy engine's events (``sa_engine``);
    SQLite's through the engine's connection pool (:meth:`watch_pool`).
    """

    def __init__(self, sa_engine: Any = None) -> None:
        self.recording = True
        self.done: list[Captured] = []
        self._open: dict[int, Captured] = {}
        self._lock = threading.Lock()
        if sa_engine is None:
            return
        from sqlalchemy import event

        event.listen(sa_engine, "begin", self._begin)
        event.listen(sa_engine, "before_cursor_execute", self._statement)
        event.listen(sa_engine, "commit", lambda conn: self._end(conn, committed=True))
        event.listen(sa_engine, "rollback", lambda conn: self._end(conn, committed=False))

    @staticmethod
    def _key(conn: Any) -> int:
        return id(conn.connection.dbapi_connection)

    def _begin(self, conn: Any) -> None:
        if self.recording:
            key = self._key(conn)
            with self._lock:
                self._open[key] = Captured(stream=(os.getpid(), key), began=time.monotonic_ns())

    def _statement(self, conn: Any, *args: Any) -> None:
        _cursor, sql, params, _context, many = args
        if not self.recording:
            return
        key = self._key(conn)
        with self._lock:
            tx = self._open.get(key)
            if tx is None:  # outside a transaction (autocommit): one of its own
                now = time.monotonic_ns()
                single = Captured(stream=(os.getpid(), key), began=now, ended=now, committed=True)
                single.statements.append((sql, params, many))
                self.done.append(single)
                return
        tx.statements.append((sql, params, many))

    def _end(self, conn: Any, *, committed: bool) -> None:
        with self._lock:
            tx = self._open.pop(self._key(conn), None)
            if tx is None or not self.recording:
                return
            tx.ended = time.monotonic_ns()
            tx.committed = committed
            if tx.statements:
                self.done.append(tx)

    def watch_pool(self, pool: Any) -> None:
        """Keep the transactions run on ``pool`` (SQLite's, on the stdlib driver)."""
        acquire = pool.acquire

        def watched() -> Any:
            conn = acquire()
            if not isinstance(conn.raw, _Watched):
                conn.raw = _Watched(conn.raw, self)
            return conn

        pool.acquire = watched

    def _plain(self, raw: Any, sql: str, params: Any) -> None:
        key = id(raw)
        with self._lock:
            if not self.recording:
                return
            if sql.startswith("BEGIN"):
                now = time.monotonic_ns()
                write = sql == "BEGIN IMMEDIATE"
                self._open[key] = Captured(stream=(os.getpid(), key), began=now, write=write)
            elif sql in ("COMMIT", "ROLLBACK"):
                tx = self._open.pop(key, None)
                if tx is not None and tx.statements:
                    tx.ended, tx.committed = time.monotonic_ns(), sql == "COMMIT"
                    self.done.append(tx)
            elif key in self._open:
                self._open[key].statements.append((sql, params, False))

    def dump(self, folder: Path, name: str) -> None:
        """Write the finished transactions to ``folder/name.pickle``."""
        with self._lock:
            done = list(self.done)
        path = folder / f"{name}.pickle"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(done))
        tmp.replace(path)


class _Watched:
    """A stdlib sqlite3 connection whose statements a :class:`Recorder` sees."""

    def __init__(self, raw: Any, recorder: Recorder) -> None:
        self._raw = raw
        self._recorder = recorder

    def execute(self, sql: str, params: Any = ()) -> Any:
        self._recorder._plain(self._raw, sql, params)
        return self._raw.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def load(folder: Path) -> list[Captured]:
    """Every transaction captured in ``folder``, by every process."""
    found: list[Captured] = []
    for path in sorted(folder.glob("*.pickle")):
        found.extend(pickle.loads(path.read_bytes()))  # noqa: S301 - the bench's own files
    return found


@dataclass
class Replayed:
    """What a replay did, and how long it took."""

    seconds: float
    transactions: int
    statements: int
    failed: int
    connections: int


def replay(url: str, captured: list[Captured], *, pipelined: bool = False) -> Replayed:
    """
    Run ``captured`` on ``url`` as described in the module's docstring.

    ``pipelined``: each transaction's statements are sent at once (psycopg's
    pipeline mode), one round trip per transaction instead of one per
    statement: what is left is the server's own work, the floor of any
    client however few round trips it makes.
    """
    return _Replay(url, captured, pipelined=pipelined).run()


def replay_sqlite(path: str, captured: list[Captured]) -> Replayed:
    """
    Run ``captured`` on the SQLite file ``path``: a plain sqlite3 loop, one connection.

    SQLite has one writer at a time, so the capture's commits are already a
    total order of its writes: they run again in that order, each opened as
    the engine opened it (BEGIN IMMEDIATE for a write), with the engine's
    settings (WAL, synchronous FULL, foreign keys).
    """
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON"):
        conn.execute(f"PRAGMA {pragma}")
    ordered = sorted(captured, key=lambda tx: tx.ended)
    failed = 0
    started = time.perf_counter()
    for tx in ordered:
        conn.execute("BEGIN IMMEDIATE" if tx.write else "BEGIN")
        try:
            for sql, params, many in tx.statements:
                if many:
                    conn.executemany(sql, params)
                else:
                    conn.execute(sql, params).fetchall()
        except sqlite3.Error:
            conn.execute("ROLLBACK")
            failed += 1
            continue
        conn.execute("COMMIT" if tx.committed else "ROLLBACK")
    seconds = time.perf_counter() - started
    conn.close()
    return Replayed(
        seconds=seconds,
        transactions=len(ordered),
        statements=sum(len(tx.statements) for tx in ordered),
        failed=failed,
        connections=1,
    )


class _Replay:
    """One replay: a thread per captured connection, ordered by the capture's commits."""

    def __init__(self, url: str, captured: list[Captured], *, pipelined: bool) -> None:
        self.url = url
        self.captured = captured
        self.pipelined = pipelined
        by_commit = sorted(captured, key=lambda tx: tx.ended)
        ends = [tx.ended for tx in by_commit]
        self.rank = {id(tx): n for n, tx in enumerate(by_commit)}
        # A transaction may start once the first `needs` of by_commit ran again.
        self.needs = {id(tx): bisect.bisect_left(ends, tx.began) for tx in captured}
        self.streams: dict[tuple[int, int], list[Captured]] = {}
        for tx in sorted(captured, key=lambda tx: tx.began):
            self.streams.setdefault(tx.stream, []).append(tx)
        self.finished = [False] * len(by_commit)
        self.prefix = 0  # every transaction of by_commit before this one ran again
        self.cond = threading.Condition()
        self.failed = 0
        self.errors: list[Exception] = []

    def run(self) -> Replayed:
        import psycopg

        connections = {key: psycopg.connect(self.url) for key in self.streams}
        threads = [
            threading.Thread(target=self._stream, args=(connections[key], self.streams[key]))
            for key in self.streams
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        for conn in connections.values():
            conn.close()
        if self.errors:
            raise self.errors[0]
        return Replayed(
            seconds=seconds,
            transactions=len(self.captured),
            statements=sum(len(tx.statements) for tx in self.captured),
            failed=self.failed,
            connections=len(self.streams),
        )

    def _ready(self, tx: Captured) -> bool:
        return self.prefix >= self.needs[id(tx)]

    def _stream(self, conn: Any, txs: list[Captured]) -> None:
        try:
            for tx in txs:
                with self.cond:
                    self.cond.wait_for(functools.partial(self._ready, tx))
                ok = self._one(conn, tx, pipelined=self.pipelined)
                with self.cond:
                    self.failed += not ok
                    self.finished[self.rank[id(tx)]] = True
                    while self.prefix < len(self.finished) and self.finished[self.prefix]:
                        self.prefix += 1
                    self.cond.notify_all()
        except Exception as exc:  # a bug of the replay's: let every stream end  # noqa: BLE001
            self.errors.append(exc)
            with self.cond:
                self.prefix = len(self.finished)
                self.cond.notify_all()

    @staticmethod
    def _one(conn: Any, tx: Captured, *, pipelined: bool) -> bool:
        import contextlib

        import psycopg

        try:
            with conn.pipeline() if pipelined else contextlib.nullcontext(), conn.cursor() as cur:
                for sql, params, many in tx.statements:
                    if many:
                        cur.executemany(sql, params)
                    else:
                        cur.execute(sql, params or None)
                if tx.committed:
                    conn.commit()
                else:
                    conn.rollback()
        except psycopg.Error:
            conn.rollback()
            return False
        return True
