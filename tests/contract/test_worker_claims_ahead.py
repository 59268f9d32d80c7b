"""
Contract: a busy worker claims its next batch in the transaction that settles the last one.

A chain of jobs (each queues the next in its completion) runs one
transaction per job, not two: the completion that queues a step claims it.
A worker asked to stop gives back a batch it claimed ahead, so nothing stays
leased to a worker that is gone; a worker stepped by hand (``run_once``)
never claims ahead.  On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import saga.core.queue.leases
from saga import Apply
from saga.core.queue.kinds import Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.queue import NewJob, enqueue_in
from tests.helpers import commits_seen

CHAIN = 10


def chain_kind(stop_after=None):
    """Each job queues the next one in its own completion, ``CHAIN`` jobs in all."""
    worker_box = []

    def step(job):
        n = int(job.payload["n"])

        def apply(tx):
            if stop_after is not None and n == stop_after:
                worker_box[0].stop()  # the signal comes as the completion claims ahead
            if n + 1 < CHAIN:
                after = NewJob(id=f"c{n + 1}", queue="q", kind="chain", payload={"n": n + 1})
                enqueue_in(tx, after)
            return {"n": n}

        return Apply(apply)

    return JobKind("chain", step, queue="q"), worker_box


def test_a_chain_of_steps_costs_one_transaction_per_step(engine, monkeypatch):
    """Ten chained jobs: ten completions (each claiming the next) and the first claim."""
    kind, _ = chain_kind()
    Queue(engine.db).enqueue(NewJob(id="c0", queue="q", kind="chain", payload={"n": 0}))
    worker = Worker(engine.db, Handlers([kind]), listen=False, batch=1, poll_interval=0.05)
    seen = commits_seen(engine.db, monkeypatch)
    report = worker.run(burst=True)
    assert (CHAIN, CHAIN) == (report.claimed, report.done)
    assert CHAIN + 1 == len(seen)


def test_a_stopping_worker_gives_back_the_batch_it_claimed_ahead(engine):
    """Stopped as a step completes: the job claimed ahead is pending again, not leased."""
    kind, box = chain_kind(stop_after=3)
    Queue(engine.db).enqueue(NewJob(id="c0", queue="q", kind="chain", payload={"n": 0}))
    worker = Worker(engine.db, Handlers([kind]), listen=False, batch=1, poll_interval=0.05)
    box.append(worker)
    worker.run()
    assert "done" == Queue(engine.db).get("c3").state
    assert "pending" == Queue(engine.db).get("c4").state


def test_a_worker_stepped_by_hand_leaves_the_next_job_pending(engine):
    """run_once() runs one batch; the job its completion queued waits for the next call."""
    kind, _ = chain_kind()
    Queue(engine.db).enqueue(NewJob(id="c0", queue="q", kind="chain", payload={"n": 0}))
    worker = Worker(engine.db, Handlers([kind]), listen=False, batch=1)
    assert 1 == worker.run_once()
    assert "pending" == Queue(engine.db).get("c1").state


def test_jobs_claimed_ahead_are_held_while_the_pollers_run(engine):
    """The pollers may wait on the network between batches: the heartbeat renews what is held."""
    kind, _ = chain_kind()
    Queue(engine.db).enqueue(NewJob(id="c0", queue="q", kind="chain", payload={"n": 0}))
    seen = []

    class Watcher:
        def poll(self):
            seen.append(set(worker._in_hand))  # what the heartbeat renews right now
            return 0

        def next_due_in(self):
            return None

    worker = Worker(
        engine.db, Handlers([kind]), listen=False, batch=1, poll_interval=0.05, pollers=[Watcher()]
    )
    worker.run(burst=True)
    assert {"c1"} in seen  # c0 done, c1 claimed ahead and held before it ran


def test_a_failing_claim_ahead_is_not_the_jobs_failure(engine, monkeypatch):
    """The claim folded into a completion breaks: the job completes anyway, without it."""

    def broken(tx, spec):
        raise RuntimeError("claim broke")

    monkeypatch.setattr(saga.core.queue.leases, "claim_in", broken)
    kind, _ = chain_kind()
    Queue(engine.db).enqueue(NewJob(id="c0", queue="q", kind="chain", payload={"n": 0}))
    worker = Worker(engine.db, Handlers([kind]), listen=False, batch=1, poll_interval=0.05)
    report = worker.run(burst=True)
    assert (CHAIN, 0, 0) == (report.done, report.retried, report.dead_lettered)
