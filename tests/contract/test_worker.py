"""Contract: a worker runs, retries, dead-letters and fences jobs, on every backend."""

from __future__ import annotations

import time

import pytest
import structlog

from saga.core.queue.backoff import Backoff
from saga.core.queue.kinds import Apply, Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.sagas.timers import timer_kind
from saga.core.workers.worker import Worker
from saga.queue import NewJob
from steps.errors import OutcomeUnknown, PermanentError, TransientError
from tests.helpers import db_now, expire_lease, make_due, rows, scalar, wait_until

FAST = Backoff(base=0.001, cap=0.001)


def worker_for(engine, *kinds, **options):
    return Worker(engine.db, Handlers(kinds), listen=False, poll_interval=0.05, **options)


def enqueue(engine, kind, job_id="j1", payload=None, max_attempts=3):
    Queue(engine.db).enqueue(
        NewJob(id=job_id, queue="q", kind=kind, payload=payload or {}, max_attempts=max_attempts)
    )


def drain(engine, worker, rounds=20):
    """Run the worker until the job is settled, making retried jobs due at once."""
    for _ in range(rounds):
        if not worker.run_once():
            for row in rows(engine, "SELECT id FROM jobs WHERE state = 'pending'"):
                make_due(engine, row["id"])
            if not worker.run_once():
                return


class TestOutcomes:
    def test_result_is_stored_with_completion(self, engine):
        """A handler's return value is the job's result."""
        kind = JobKind("double", lambda job: {"n": job.payload["n"] * 2}, queue="q")
        enqueue(engine, "double", payload={"n": 21})
        worker = worker_for(engine, kind)
        assert 1 == worker.run_once()
        queue = Queue(engine.db)
        assert ("done", {"n": 42}) == (queue.get("j1").state, queue.result("j1"))
        assert 1 == worker.report.done

    def test_transient_errors_retry_then_dead_letter(self, engine):
        """A transient error is retried with backoff up to max_attempts, then dead-lettered."""
        calls = []

        def flaky(job):
            calls.append(job.attempt)
            raise TransientError("provider 503")

        enqueue(engine, "flaky", max_attempts=3)
        worker = worker_for(engine, JobKind("flaky", flaky, queue="q", backoff=FAST))
        with structlog.testing.capture_logs() as logs:
            drain(engine, worker)
        info = Queue(engine.db).get("j1")
        assert [1, 2, 3] == calls
        assert ("failed", "transient") == (info.state, info.error_class)
        assert "gave up after 3 attempt(s)" in info.last_error
        events = [entry["event"] for entry in logs]
        assert 2 == events.count("job_retry")
        assert 1 == events.count("job_dead_lettered")

    def test_transient_error_then_success(self, engine):
        """A job that fails once and then succeeds ends done on attempt 2."""

        def once(job):
            if job.attempt == 1:
                raise ConnectionError("reset")
            return {"attempt": job.attempt}

        enqueue(engine, "once")
        drain(engine, worker_for(engine, JobKind("once", once, queue="q", backoff=FAST)))
        assert {"attempt": 2} == Queue(engine.db).result("j1")

    def test_retry_is_delayed_by_the_backoff(self, engine):
        """A retried job is not due again before its backoff delay."""

        def fail(job):
            raise TransientError("later")

        enqueue(engine, "slow")
        worker = worker_for(
            engine, JobKind("slow", fail, queue="q", backoff=Backoff(base=3600, cap=3600))
        )
        worker.run_once()
        assert 0 == worker.run_once()
        assert "pending" == Queue(engine.db).get("j1").state

    def test_permanent_error_is_dead_lettered_at_once(self, engine):
        """Retrying cannot fix bad input: one attempt, then a dead letter."""

        def bad(job):
            raise PermanentError("course does not exist")

        enqueue(engine, "bad")
        drain(engine, worker_for(engine, JobKind("bad", bad, queue="q", backoff=FAST)))
        info = Queue(engine.db).get("j1")
        assert ("failed", "permanent", 1) == (info.state, info.error_class, info.attempts)

    def test_unknown_outcome_is_never_retried_blindly(self, engine):
        """Without an owner for the unknown, the job becomes a dead letter of class unknown."""

        def charge(job):
            raise OutcomeUnknown("timed out after sending", evidence={"sent": {"key": "k1"}})

        enqueue(engine, "charge")
        drain(engine, worker_for(engine, JobKind("charge", charge, queue="q", backoff=FAST)))
        info = Queue(engine.db).get("j1")
        assert ("failed", "unknown", 1) == (info.state, info.error_class, info.attempts)

    def test_unknown_outcome_is_handed_over_in_the_completion_transaction(self, engine):
        """With on_unknown, the hand-over and the completion commit together."""
        handed = []

        def charge(job):
            raise OutcomeUnknown("timed out", evidence={"sent": {"key": "k1"}})

        def hand_over(tx, job, error):
            handed.append((job.id, error.evidence))

        kind = JobKind("charge", charge, queue="q", on_unknown=hand_over)
        enqueue(engine, "charge")
        worker_for(engine, kind).run_once()
        assert [("j1", {"sent": {"key": "k1"}})] == handed
        queue = Queue(engine.db)
        assert "done" == queue.get("j1").state
        assert "unknown" == queue.result("j1")["outcome"]

    def test_apply_commits_the_effect_with_the_completion(self, engine):
        """An Apply result runs inside the fenced completion transaction."""

        def effect(job):
            return Apply(lambda tx: tx.scalar("db_now") is not None and {"applied": True})

        enqueue(engine, "effect")
        worker_for(engine, JobKind("effect", effect, queue="q")).run_once()
        assert {"applied": True} == Queue(engine.db).result("j1")


class TestLeases:
    def test_heartbeat_keeps_a_long_job_owned(self, engine):
        """A handler running past its lease keeps it: the heartbeat extends it."""

        def slow(job):
            # Outlive the lease the job was claimed with, by the database clock.
            while db_now(engine) <= job.lease_until:
                time.sleep(0.05)
            return {"slept": True}

        enqueue(engine, "slow")
        worker = worker_for(engine, JobKind("slow", slow, queue="q"), lease_seconds=0.45)
        with worker._heartbeat():
            worker.run_once()
        assert {"slept": True} == Queue(engine.db).result("j1")
        assert 0 == worker.report.lost_leases

    def test_worker_that_lost_its_lease_reports_no_success(self, engine):
        """If the lease expired under a running handler, its result is discarded and logged."""

        def overtaken(job):
            expire_lease(engine, job.id)
            return {"by": "stale worker"}

        enqueue(engine, "overtaken")
        worker = worker_for(engine, JobKind("overtaken", overtaken, queue="q"))
        with structlog.testing.capture_logs() as logs:
            worker.run_once()
        assert 1 == worker.report.lost_leases
        assert 0 == worker.report.done
        assert "lease_lost" in [entry["event"] for entry in logs]
        assert 0 == scalar(engine, "SELECT count(*) FROM job_results")

    def test_stop_releases_claimed_jobs_that_did_not_start(self, engine):
        """A graceful stop finishes the running job and gives back the rest of the batch."""
        worker = None

        def first_stops(job):
            worker.stop()

        for n in range(3):
            enqueue(engine, "stop", job_id=f"s{n}")
        worker = worker_for(engine, JobKind("stop", first_stops, queue="q"))
        worker.run(burst=True)
        states = {
            r["id"]: (r["state"], r["attempts"])
            for r in rows(engine, "SELECT id, state, attempts FROM jobs")
        }
        assert {"s1": ("pending", 0), "s2": ("pending", 0)} == states
        assert (1, 2) == (worker.report.done, worker.report.released)

    def test_burst_returns_when_nothing_is_due(self, engine):
        """--burst: run what is due, then return."""
        for n in range(5):
            enqueue(engine, "noop", job_id=f"n{n}")
        enqueue(engine, "noop", job_id="later")
        make_due(engine, "later")
        Queue(engine.db).enqueue(NewJob(id="future", queue="q", kind="noop", delay_seconds=3600))
        report = worker_for(engine, JobKind("noop", lambda job: None, queue="q"), batch=2).run(
            burst=True
        )
        assert 6 == report.done
        assert "pending" == Queue(engine.db).get("future").state


class TestTimers:
    @pytest.fixture
    def purchase(self, engine):
        engine.services.catalogue.add("js", seats=2, price="10.00", currency="EUR")
        return engine.services.purchases.start(
            operation_id="op-1", intensive_id="js", student_id="s1", hold_seconds=60
        ).purchase

    def test_deadline_fires_through_the_queue_once(self, engine, purchase):
        """When the hold deadline is due, a worker fires it; a second worker finds nothing."""
        timer = f"timer:{purchase.id}:1"
        make_due(engine, timer)
        timers = Handlers([timer_kind(engine)])
        first = Worker(engine.db, timers, listen=False)
        second = Worker(engine.db, timers, listen=False)
        assert 1 == first.run_once()
        assert 0 == second.run_once()
        history = engine.services.purchases.get(purchase.id).history
        # No payment was requested yet: the provider has nothing, the hold expires.
        assert [("start", "api"), ("hold_expired", "timer")] == [
            (h.event, h.actor) for h in history
        ]
        assert "expired" == engine.services.purchases.get(purchase.id).state

    def test_timer_of_an_old_version_does_nothing(self, engine, purchase):
        """A timer set for a version the saga has left is a no-op, not a late transition."""
        timer = f"timer:{purchase.id}:1"
        engine.sagas.fire(
            purchase.id,
            "payment_succeeded",
            payload={"amount_minor": 1000, "currency": "EUR"},
            actor="test",
        )
        assert 0 == scalar(engine, "SELECT count(*) FROM jobs WHERE id = :id", id=timer)
        # A timer claimed before the transition (still running somewhere) is stale too:
        Queue(engine.db).enqueue(
            NewJob(
                id=timer,
                queue="timers",
                kind="saga.timeout",
                saga_id=purchase.id,
                payload={"saga_id": purchase.id, "version": 1, "event": "hold_expired"},
            )
        )
        Worker(engine.db, Handlers([timer_kind(engine)]), listen=False).run_once()
        assert "confirmed" == engine.services.purchases.get(purchase.id).state
        assert "saga moved on" in Queue(engine.db).result(timer)["skipped"]


def test_an_effect_that_fails_is_retried_and_the_worker_lives_on(engine):
    """If the completion's effect raises, the job is retried; other jobs still complete."""
    calls = []

    def broken_then_fine(job):
        calls.append(job.attempt)
        if job.payload.get("broken") and job.attempt == 1:
            return Apply(lambda tx: 1 / 0)
        return Apply(lambda tx: {"attempt": job.attempt})

    kind = JobKind("effect", broken_then_fine, queue="q", backoff=FAST)
    enqueue(engine, "effect", job_id="a", payload={"broken": True})
    enqueue(engine, "effect", job_id="b")
    drain(engine, worker_for(engine, kind))
    queue = Queue(engine.db)
    assert ({"attempt": 2}, {"attempt": 1}) == (queue.result("a"), queue.result("b"))


def _lease_until(engine, job_id):
    return rows(engine, "SELECT lease_until FROM jobs WHERE id = :id", id=job_id)[0]["lease_until"]


def test_a_job_settled_early_in_its_batch_is_never_reported_lost(engine):
    """The heartbeat renews only leases the worker still holds: no false lease_lost."""
    enqueue(engine, "t.apply", job_id="a1")
    enqueue(engine, "t.slow", job_id="a2")

    def slow(job):
        # Wait for a real signal: the heartbeat renewed this job's lease.
        first = _lease_until(engine, "a2")
        wait_until(lambda: _lease_until(engine, "a2") != first, timeout=60)
        return {"renewed": True}

    worker = worker_for(
        engine,
        JobKind("t.apply", lambda job: Apply(lambda tx: {"applied": True}), queue="q"),
        JobKind("t.slow", slow, queue="q"),
        lease_seconds=6,
        batch=10,
    )
    worker.run(burst=True)
    assert (2, 0) == (worker.report.done, worker.report.lost_leases)
