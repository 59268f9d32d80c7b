"""
Contract: a job kind's limits hold, and a killed worker's batch comes back at once.

`JobKind(max_attempts=…)` bounds the attempts whatever the job was accepted
with; `timeout_seconds` ends an attempt that hangs (the heartbeat stops, the
attempt fails as `timed_out`, the rest of the batch is given back); expired
leases are rescued in batches the first time, alone after that.  On SQLite
and on PostgreSQL.
"""

from __future__ import annotations

import threading

from saga.core.queue.backoff import Backoff
from saga.core.queue.kinds import Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.queue import NewJob
from steps.errors import TransientError
from tests.helpers import expire_lease, make_due, rows, wait_until

FAST = Backoff(base=0.001, cap=0.001)


def enqueue(engine, kind, job_id, max_attempts=3):
    Queue(engine.db).enqueue(NewJob(id=job_id, queue="q", kind=kind, max_attempts=max_attempts))


def test_the_kinds_max_attempts_bounds_the_job(engine):
    """JobKind(max_attempts=2) runs a failing job twice, then dead-letters it."""
    calls = []

    def flaky(job):
        calls.append(job.attempt)
        raise TransientError("provider 503")

    kind = JobKind("flaky", flaky, queue="q", max_attempts=2, backoff=FAST)
    enqueue(engine, "flaky", "j1", max_attempts=3)  # accepted with more: the kind still bounds
    worker = Worker(engine.db, Handlers([kind]), listen=False, poll_interval=0.05)
    for _ in range(5):
        worker.run_once()
        for row in rows(engine, "SELECT id FROM jobs WHERE state = 'pending'"):
            make_due(engine, row["id"])
    assert [1, 2] == calls
    job = Queue(engine.db).get("j1")
    assert ("failed", 2) == (job.state, job.attempts)
    assert job.last_error.startswith("gave up after 2 attempt(s)")


def test_a_hung_attempt_times_out_and_its_batch_is_given_back(engine):
    """Past timeout_seconds the attempt fails as timed_out, the lease is not renewed."""
    release = threading.Event()
    started = threading.Event()

    def hang(job):
        started.set()
        release.wait(120)
        return {"late": True}

    kind = JobKind("hang", hang, queue="q", timeout_seconds=0.5, backoff=FAST)
    enqueue(engine, "hang", "a")
    enqueue(engine, "hang", "b")
    worker = Worker(
        engine.db, Handlers([kind]), listen=False, lease_seconds=30, batch=2, poll_interval=0.05
    )
    thread = threading.Thread(target=worker.run, kwargs={"burst": True}, daemon=True)
    thread.start()

    def settled_by_timeout():
        jobs = {r["id"]: r for r in rows(engine, "SELECT * FROM jobs")}
        hung = [r for r in jobs.values() if r["error_class"] == "timed_out"]
        waiting = [r for r in jobs.values() if r["state"] == "pending" and r["attempts"] == 0]
        return (hung, waiting) if hung and waiting else None

    try:
        assert started.wait(60)
        hung, waiting = wait_until(settled_by_timeout)
    finally:
        release.set()
        thread.join(timeout=60)
    assert [("pending", 1)] == [(r["state"], r["attempts"]) for r in hung]
    assert 1 == len(waiting)  # the other job of the batch was given back, never started
    assert 1 == worker.report.timed_out
    # The hung attempt's late answer was discarded; the job finished on its next attempt.
    assert 2 == Queue(engine.db).get(hung[0]["id"]).attempts


def test_a_killed_workers_batch_is_rescued_at_once(engine):
    """All expired leases come back in one claim the first time (then one at a time)."""
    for n in range(5):
        enqueue(engine, "k", f"j{n}")
    queue = Queue(engine.db)
    first = queue.claim(["k"], batch=10, lease_seconds=30)
    assert 5 == len(first)
    for job in first:
        expire_lease(engine, job.id)  # the worker was killed holding them
    rescued = queue.claim(["k"], batch=10, lease_seconds=30, rescue=True)
    assert sorted(j.id for j in first) == sorted(j.id for j in rescued)
    for job in rescued:
        expire_lease(engine, job.id)  # killed again: one of them may be the killer
    assert 1 == len(queue.claim(["k"], batch=10, lease_seconds=30, rescue=True))
    assert 1 == len(queue.claim(["k"], batch=10, lease_seconds=30, rescue=True))


def test_retry_and_fail_are_fenced(engine):
    """A worker whose lease expired can neither retry nor dead-letter the job."""
    enqueue(engine, "k", "j1")
    queue = Queue(engine.db)
    (stale,) = queue.claim(["k"], batch=1, lease_seconds=30)
    expire_lease(engine, "j1")
    assert not queue.retry(stale, delay=0, error="late", error_class="transient")
    assert not queue.fail(stale, error="late", error_class="permanent")
    (owner,) = queue.claim(["k"], batch=1, lease_seconds=30, rescue=True)
    assert not queue.retry(stale, delay=0, error="late", error_class="transient")
    assert not queue.fail(stale, error="late", error_class="permanent")
    assert owner.token != stale.token
    assert "running" == queue.get("j1").state
