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

import pytest

import saga.core.workers.worker
from saga.core.queue.kinds import Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.exceptions import DatabaseError, DatabaseUnavailable
from saga.queue import NewJob


def _failing_first(monkeypatch, error):
    """Make the worker's next claim fail with ``error``, then claim as usual; the calls."""
    claim_in = saga.core.workers.worker.claim_in
    calls = []

    def claim(tx, spec):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return claim_in(tx, spec)

    monkeypatch.setattr(saga.core.workers.worker, "claim_in", claim)
    return calls


def _worker(engine, ran=None):
    """A worker with one job to run; ``ran`` is set when its handler runs."""

    def handler(job):
        if ran is not None:
            ran.set()
        return {"ran": job.id}

    kind = JobKind("noop", handler, queue="q")
    Queue(engine.db).enqueue(NewJob(id="j1", queue="q", kind="noop", payload={}))
    return Worker(engine.db, Handlers([kind]), listen=False, poll_interval=0.01)


DROPPED = DatabaseUnavailable("PostgreSQL ended the session", sqlstate="57P01")


def test_a_worker_whose_claim_was_dropped_claims_again_and_works(engine, monkeypatch):
    ran = threading.Event()
    worker = _worker(engine, ran)
    calls = _failing_first(monkeypatch, DROPPED)

    def run():
        try:
            worker.run()
        finally:
            ran.set()  # a worker that died is a signal too: the job is not done then

    running = threading.Thread(target=run)
    running.start()
    try:
        # A bound for a hung worker, not a speed: the handler running is the signal.
        assert ran.wait(timeout=60), "the worker never claimed again"
    finally:
        worker.stop()  # after the job in hand is completed
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
