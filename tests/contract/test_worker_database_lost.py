"""
Contract: a claim the database dropped does not end the worker.

The claim's outcome is unknown (if it committed, the leases run out and the
rescue hands the jobs back), so the worker waits, backing off, and claims
again; only the database being unavailable is taken so: any other error
still ends the process, for the supervisor to start a fresh one, and a
burst run (finish what is due, then exit) says it could not.  On SQLite
and on PostgreSQL (the real session ended by PostgreSQL: tests/integration/
test_db_faults.py, and `saga chaos`' end_sessions).
"""

from __future__ import annotations

import threading
import time

import pytest

import saga.core.worker
from saga import NewJob
from saga.core.handlers import Handlers, JobKind
from saga.core.queue import Queue
from saga.core.worker import Worker
from saga.exceptions import DatabaseError, DatabaseUnavailable


def _failing_first(monkeypatch, error):
    """Make the worker's next claim fail with ``error``, then claim as usual; the calls."""
    claim_in = saga.core.worker.claim_in
    calls = []

    def claim(tx, spec):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return claim_in(tx, spec)

    monkeypatch.setattr(saga.core.worker, "claim_in", claim)
    return calls


def _worker(engine):
    kind = JobKind("noop", lambda job: {"ran": job.id}, queue="q")
    Queue(engine.db).enqueue(NewJob(id="j1", queue="q", kind="noop", payload={}))
    return Worker(engine.db, Handlers([kind]), listen=False, poll_interval=0.01)


DROPPED = DatabaseUnavailable("PostgreSQL ended the session", sqlstate="57P01")


def test_a_worker_whose_claim_was_dropped_claims_again_and_works(engine, monkeypatch):
    worker = _worker(engine)
    calls = _failing_first(monkeypatch, DROPPED)
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        deadline = time.monotonic() + 60  # a bound for a hung worker, not a speed
        while Queue(engine.db).get("j1").state != "done" and running.is_alive():
            assert time.monotonic() < deadline, "the worker never claimed again"
            time.sleep(0.01)
    finally:
        worker.stop()
        running.join()
    assert "done" == Queue(engine.db).get("j1").state
    assert len(calls) >= 2


def test_a_burst_run_says_the_database_dropped_its_claim(engine, monkeypatch):
    worker = _worker(engine)
    _failing_first(monkeypatch, DROPPED)
    with pytest.raises(DatabaseUnavailable):
        worker.run(burst=True)


def test_any_other_database_error_still_ends_the_worker(engine, monkeypatch):
    worker = _worker(engine)
    _failing_first(monkeypatch, DatabaseError("syntax error", sqlstate="42601"))
    with pytest.raises(DatabaseError, match="syntax error"):
        worker.run(burst=True)
