"""
Count the engine's transactions and statements, per process, for bench/saga.

On ``PYTHONPATH`` with ``SAGA_BENCH_COUNT=<folder>``, every engine database
made in the process counts its commits, rollbacks and statements
(SQLAlchemy's events on PostgreSQL; on SQLite, whose transactions run on
the stdlib driver, the engine's own calls) and writes them to ``<folder>/<pid>.json`` when the
process ends, and every second before (a worker process killed by the bench
still leaves its figures).  These are the transactions the engine asks for;
PostgreSQL counts more (it runs one in each listening session to deliver a
notification).

With ``SAGA_BENCH_CAPTURE=<folder>`` as well, every transaction is also kept
whole (``replay.Recorder``) and written to ``<folder>/<pid>.pickle`` when the
process ends, for the replay floor.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

FOLDER = os.environ.get("SAGA_BENCH_COUNT")
CAPTURE = os.environ.get("SAGA_BENCH_CAPTURE")

if FOLDER:
    import atexit
    import multiprocessing.util

    from sqlalchemy import event

    import saga.core.store.db as _db

    counts = {"commits": 0, "rollbacks": 0, "statements": 0}
    lock = threading.Lock()
    started: set[int] = set()  # the processes whose dumping has begun

    def _bump(name: str) -> None:
        with lock:
            counts[name] += 1

    def _dump() -> None:
        with lock:
            snapshot = dict(counts)
        path = Path(str(FOLDER)) / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(snapshot))
        tmp.replace(path)

    def _every_second() -> None:
        while True:
            threading.Event().wait(1.0)
            _dump()

    original = _db.Database.__init__

    def _start_dumping() -> None:
        # Here, not at import: the worker processes are forked from a server
        # process that imported this module; a fork keeps neither its thread
        # nor its multiprocessing finalizers.
        if os.getpid() in started:
            return
        started.add(os.getpid())
        threading.Thread(target=_every_second, daemon=True).start()
        atexit.register(_dump)
        # A multiprocessing child (the worker processes) ends without atexit.
        multiprocessing.util.Finalize(None, _dump, exitpriority=100)

    def _capture(database) -> None:  # type: ignore[no-untyped-def]
        from replay import Recorder

        if database._pool is not None:
            recorder = Recorder()
            recorder.watch_pool(database._pool)
        else:
            recorder = Recorder(database.engine)
        name = f"{os.getpid()}-{id(recorder)}"

        def dump() -> None:
            recorder.dump(Path(str(CAPTURE)), name)

        atexit.register(dump)
        multiprocessing.util.Finalize(None, dump, exitpriority=100)

    def counting_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        _start_dumping()
        if CAPTURE:
            _capture(self)
        if self._pool is None:
            event.listen(self.engine, "before_cursor_execute", lambda *a: _bump("statements"))
            event.listen(self.engine, "commit", lambda conn: _bump("commits"))
            event.listen(self.engine, "rollback", lambda conn: _bump("rollbacks"))

    _db.Database.__init__ = counting_init  # type: ignore[method-assign]

    # SQLite's transactions run on the stdlib driver, unseen by SQLAlchemy.
    plain_execute = _db.PlainConnection.execute
    plain_once = _db.Database._plain_once

    def counted_execute(self, sql, params):  # type: ignore[no-untyped-def]
        _bump("statements")
        return plain_execute(self, sql, params)

    def counted_plain_once(self, work, *, write):  # type: ignore[no-untyped-def]
        try:
            result = plain_once(self, work, write=write)
        except BaseException:
            _bump("rollbacks")
            raise
        _bump("commits")
        return result

    _db.PlainConnection.execute = counted_execute  # type: ignore[method-assign]
    _db.Database._plain_once = counted_plain_once  # type: ignore[method-assign]
