"""Contract: the job queue (acceptance, leases, fencing, dead letters), on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from saga.codec import as_utc
from saga.core.ops.stats import collect
from saga.core.queue.dead_letters import DeadLetters, Filter
from saga.core.queue.leases import Queue
from saga.core.queue.values import Done
from saga.exceptions import JobConflict, NotFound
from saga.queue import NewJob, enqueue_in
from tests.helpers import dump, execute, expire_lease, expire_lease_in, make_due, rows, scalar

KINDS = ["export", "noop"]


@pytest.fixture
def queue(engine):
    return Queue(engine.db)


def export(course, job_id="export-1", **kwargs):
    return NewJob(id=job_id, queue="exports", kind="export", payload={"course": course}, **kwargs)


def claim_one(queue, lease_seconds=30):
    (job,) = queue.claim(KINDS, batch=10, lease_seconds=lease_seconds)
    return job


class TestAcceptance:
    def test_seed_scenario_javascript_then_markdown(self, engine, queue):
        """Accept JavaScript, accept it again (one row, same state), then Markdown: conflict."""
        first = queue.enqueue(export("JavaScript"))
        again = queue.enqueue(export("JavaScript"))
        assert (True, False) == (first.created, again.created)
        assert first.job == again.job
        assert 1 == scalar(engine, "SELECT count(*) FROM jobs")
        before = dump(engine)
        with pytest.raises(JobConflict) as info:
            queue.enqueue(export("Markdown"))
        assert "export-1" == info.value.job_id
        assert before == dump(engine)

    def test_same_id_other_kind_conflicts(self, queue):
        """The kind is part of what a job is."""
        queue.enqueue(export("JavaScript"))
        with pytest.raises(JobConflict):
            queue.enqueue(
                NewJob(
                    id="export-1", queue="exports", kind="noop", payload={"course": "JavaScript"}
                )
            )

    def test_acceptance_reports_the_current_state(self, queue):
        """A repeated acceptance returns the job as it is now, not as it was."""
        queue.enqueue(export("JavaScript"))
        claim_one(queue)
        assert "running" == queue.enqueue(export("JavaScript")).job.state

    def test_finished_job_is_not_accepted_twice(self, engine, queue):
        """An id that already finished returns the finished job: it never runs again."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        assert {job.id} == queue.complete([Done(job, {"rows": 3})])
        again = queue.enqueue(export("JavaScript"))
        assert (False, "done") == (again.created, again.job.state)
        assert 0 == scalar(engine, "SELECT count(*) FROM jobs")
        with pytest.raises(JobConflict):
            queue.enqueue(export("Markdown"))

    def test_many_jobs_are_accepted_at_once(self, engine, queue):
        """A batch acceptance inserts new ids and recognizes repeated ones."""
        jobs = [NewJob(id=f"n{n}", queue="q", kind="noop", payload={"n": n}) for n in range(5)]
        assert [True] * 5 == queue.enqueue_many(jobs, chunk=2)
        again = [*jobs[:2], NewJob(id="n9", queue="q", kind="noop")]
        assert [False, False, True] == queue.enqueue_many(again)
        assert 6 == scalar(engine, "SELECT count(*) FROM jobs")
        assert {"n": 3} == queue.get("n3").payload

    def test_a_conflict_in_a_batch_accepts_none_of_it(self, engine, queue):
        """A chunk is all-or-nothing: one reused id with other content refuses it all."""
        queue.enqueue(NewJob(id="n1", queue="q", kind="noop", payload={"n": 1}))
        before = dump(engine)
        batch = [
            NewJob(id="n0", queue="q", kind="noop"),
            NewJob(id="n1", queue="q", kind="noop", payload={"n": "other"}),
        ]
        with pytest.raises(JobConflict):
            queue.enqueue_many(batch)
        assert before == dump(engine)

    def test_a_repeated_id_within_a_batch_must_match(self, queue):
        """The same id twice in one batch is one job if equal, a conflict if not."""
        same = [NewJob(id="n0", queue="q", kind="noop")] * 2
        assert [True, False] == queue.enqueue_many(same)
        with pytest.raises(JobConflict):
            queue.enqueue_many(
                [
                    NewJob(id="x", queue="q", kind="noop", payload={"a": 1}),
                    NewJob(id="x", queue="q", kind="noop", payload={"a": 2}),
                ]
            )

    def test_unknown_job_is_not_found(self, queue):
        """Reading an id never accepted raises NotFound."""
        with pytest.raises(NotFound):
            queue.get("nope")


class TestClaim:
    def test_claim_takes_a_lease_from_the_database_clock(self, engine, queue):
        """running, attempt 1, a fresh token, lease_until = database now + lease."""
        queue.enqueue(export("JavaScript"))
        now = as_utc(
            scalar(
                engine,
                "SELECT "
                + (
                    "strftime('%Y-%m-%dT%H:%M:%fZ','now')"
                    if engine.db.dialect == "sqlite"
                    else "clock_timestamp()"
                ),
            )
        )
        job = claim_one(queue, lease_seconds=30)
        assert (1, {"course": "JavaScript"}) == (job.attempt, job.payload)
        assert timedelta(seconds=29) < job.lease_until - now < timedelta(seconds=31)
        assert "running" == queue.get(job.id).state

    def test_each_claim_has_its_own_token(self, queue):
        """Two claims never share a token."""
        queue.enqueue(export("A", job_id="a"))
        first = claim_one(queue)
        queue.enqueue(export("B", job_id="b"))
        second = claim_one(queue)
        assert first.token != second.token

    def test_claim_skips_jobs_not_yet_due(self, engine, queue):
        """A delayed job waits for its available_at."""
        queue.enqueue(export("JavaScript", delay_seconds=3600))
        assert [] == queue.claim(KINDS, batch=10)
        make_due(engine, "export-1")
        assert ["export-1"] == [job.id for job in queue.claim(KINDS, batch=10)]

    def test_next_due_is_none_when_nothing_is_pending(self, queue):
        """An empty queue is not "due now": idle workers must sleep, not spin."""
        assert queue.next_due_in(KINDS) is None
        queue.enqueue(export("JavaScript", delay_seconds=3600))
        assert 3500 < queue.next_due_in(KINDS) <= 3600

    def test_claim_only_takes_kinds_it_can_run(self, queue):
        """Jobs of kinds the worker has no handler for stay pending."""
        queue.enqueue(export("JavaScript"))
        assert [] == queue.claim(["noop"], batch=10)

    def test_claim_is_batched_in_order(self, queue):
        """Up to batch due jobs, oldest first, under one token."""
        for n in range(5):
            queue.enqueue(NewJob(id=f"n{n}", queue="q", kind="noop"))
        jobs = queue.claim(KINDS, batch=3)
        assert ["n0", "n1", "n2"] == [job.id for job in jobs]
        assert 1 == len({job.token for job in jobs})

    def test_expired_lease_is_taken_over_alone_with_a_new_token(self, engine, queue):
        """A job whose worker vanished comes back alone, attempt 2, new token."""
        queue.enqueue(export("JavaScript"))
        stale = claim_one(queue)
        for n in range(3):
            queue.enqueue(NewJob(id=f"n{n}", queue="q", kind="noop"))
        expire_lease(engine, stale.id)
        fresh = queue.claim(KINDS, batch=10)
        assert [(stale.id, 2)] == [(job.id, job.attempt) for job in fresh]
        assert fresh[0].token != stale.token

    def test_expired_lease_on_last_attempt_becomes_a_dead_letter(self, engine, queue):
        """A job that outlived its lease on every attempt is dead-lettered, not rerun."""
        queue.enqueue(export("JavaScript", max_attempts=1))
        job = claim_one(queue)
        expire_lease(engine, job.id)
        assert [] == queue.claim(KINDS, batch=10)
        info = queue.get(job.id)
        assert ("failed", "crashed") == (info.state, info.error_class)
        assert "lease expired on the last attempt" in info.last_error


class TestFencing:
    def test_complete_with_the_token_archives_and_stores_one_result(self, engine, queue):
        """Completion moves the job to the archive with its result, in one transaction."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        assert {job.id} == queue.complete([Done(job, {"rows": 3})])
        assert "done" == queue.get(job.id).state
        assert {"rows": 3} == queue.result(job.id)
        assert 1 == scalar(engine, "SELECT count(*) FROM job_results")
        assert 0 == scalar(engine, "SELECT count(*) FROM job_payloads")

    def test_stale_token_cannot_complete(self, engine, queue):
        """Another token (a previous claim's) completes nothing."""
        queue.enqueue(export("JavaScript"))
        stale = claim_one(queue)
        expire_lease(engine, stale.id)
        fresh = claim_one(queue)
        before = dump(engine)
        assert set() == queue.complete([Done(stale, {"by": "stale"})])
        assert before == dump(engine)
        assert {fresh.id} == queue.complete([Done(fresh, {"by": "fresh"})])
        assert {"by": "fresh"} == queue.result(fresh.id)
        assert 1 == scalar(engine, "SELECT count(*) FROM job_results")

    def test_expired_lease_cannot_complete_even_with_its_token(self, engine, queue):
        """The right token after its lease expired is refused too: the clock decides."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        expire_lease(engine, job.id)
        assert set() == queue.complete([Done(job, None)])
        assert not queue.retry(job, delay=0, error="e", error_class="transient")
        assert not queue.fail(job, error="e", error_class="permanent")
        assert set() == queue.extend([job], lease_seconds=30)
        assert set() == queue.release([job])
        assert "running" == queue.get(job.id).state

    def test_batch_completion_settles_only_owned_jobs(self, engine, queue):
        """In one batch, jobs still owned complete; a lost one is left alone."""
        for n in range(3):
            queue.enqueue(NewJob(id=f"n{n}", queue="q", kind="noop"))
        jobs = queue.claim(KINDS, batch=10)
        expire_lease(engine, "n1")
        assert {"n0", "n2"} == queue.complete([Done(job) for job in jobs])
        assert "running" == queue.get("n1").state

    def test_complete_with_keeps_the_effect_only_when_owned(self, engine, queue):
        """A database effect commits with the completion, and never for a stale worker."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)

        def effect_of(worker):
            def effect(tx):
                enqueue_in(tx, export("Go", job_id=f"after-{worker}"))
                return {"ok": True}

            return effect

        expire_lease(engine, job.id)
        assert (False, None) == queue.complete_with(job, effect_of("stale"))
        with pytest.raises(NotFound):
            queue.get("after-stale")
        fresh = claim_one(queue)
        assert (True, {"ok": True}) == queue.complete_with(fresh, effect_of("fresh"))
        assert {"ok": True} == queue.result(fresh.id)
        assert "pending" == queue.get("after-fresh").state

    def test_a_lease_lost_while_the_effect_runs_rolls_the_effect_back(self, engine, queue):
        """Fenced last: a lease that expires mid-transaction keeps none of its writes."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)

        def effect(tx):
            enqueue_in(tx, export("Go", job_id="written-by-a-stale-worker"))
            # The worker stalls here (a pause, a lock wait) past its lease.
            expire_lease_in(tx, job.id)
            return {"ok": True}

        assert (False, None) == queue.complete_with(job, effect)
        with pytest.raises(NotFound):
            queue.get("written-by-a-stale-worker")
        assert "running" == queue.get(job.id).state

    def test_effect_that_fails_leaves_the_job_running(self, queue):
        """If the effect raises, the completion rolls back with it."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)

        def broken(tx):
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            queue.complete_with(job, broken)
        assert "running" == queue.get(job.id).state

    def test_retry_returns_the_job_with_a_delay_and_its_error(self, engine, queue):
        """Retry: pending again, due after the delay, attempts kept, error stored."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        assert queue.retry(job, delay=3600, error="TimeoutError", error_class="transient")
        info = queue.get(job.id)
        assert ("pending", 1, "TimeoutError") == (info.state, info.attempts, info.last_error)
        assert [] == queue.claim(KINDS, batch=10)
        make_due(engine, job.id)
        assert 2 == claim_one(queue).attempt

    def test_fail_dead_letters_with_the_reason(self, queue):
        """fail: failed, with its class and error, no lease."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        assert queue.fail(job, error="ValueError: bad course", error_class="permanent")
        info = queue.get(job.id)
        assert ("failed", "permanent", None) == (info.state, info.error_class, info.lease_until)
        assert info.finished_at is not None

    def test_extend_pushes_the_lease(self, queue):
        """A matching, unexpired token extends the lease."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue, lease_seconds=5)
        assert {job.id} == queue.extend([job], lease_seconds=600)
        assert queue.get(job.id).lease_until > job.lease_until + timedelta(seconds=500)

    def test_release_gives_the_job_back_unattempted(self, queue):
        """A released job is pending again with the attempt given back."""
        queue.enqueue(export("JavaScript"))
        job = claim_one(queue)
        assert {job.id} == queue.release([job])
        info = queue.get(job.id)
        assert ("pending", 0) == (info.state, info.attempts)

    def test_database_refuses_a_lease_outside_running(self, engine, queue):
        """A CHECK constraint forbids a pending job holding a lease."""
        queue.enqueue(export("JavaScript"))
        with pytest.raises(Exception, match="jobs_lease_only_while_running"):
            execute(engine, "UPDATE jobs SET lease_token = 'x' WHERE id = 'export-1'")


class TestDeadLetters:
    @pytest.fixture
    def dead(self, queue):
        for n in range(3):
            queue.enqueue(NewJob(id=f"d{n}", queue="q", kind="noop", payload={"n": n}))
        for job in queue.claim(KINDS, batch=10):
            queue.fail(job, error="boom", error_class="permanent")
        return DeadLetters(queue.db)

    def test_list_shows_reason_and_error(self, dead):
        """Dead letters come with their class and last error."""
        letters = dead.find()
        assert ["d0", "d1", "d2"] == [letter.id for letter in letters]
        assert {("permanent", "boom")} == {(d.error_class, d.last_error) for d in letters}

    def test_replay_gives_fresh_attempts_and_is_audited(self, engine, queue, dead):
        """A replayed job is pending with attempts reset; an audit row says who and why."""
        report = dead.replay(Filter(job_id="d1"), actor="ann", reason="bug fixed")
        assert (["d1"], []) == (report.replayed, report.skipped)
        info = queue.get("d1")
        assert ("pending", 0) == (info.state, info.attempts)
        audit = rows(engine, "SELECT job_id, actor, reason, previous_error FROM job_replays")
        assert [
            {"job_id": "d1", "actor": "ann", "reason": "bug fixed", "previous_error": "boom"}
        ] == audit

    def test_replaying_resolved_work_is_a_no_op(self, engine, queue, dead):
        """Replaying a job that is no longer a dead letter changes nothing."""
        dead.replay(Filter(job_id="d1"), actor="ann")
        job = claim_one(queue)
        queue.complete([Done(job)])
        before = dump(engine)
        report = dead.replay(Filter(job_id="d1"), actor="ann")
        assert ([], []) == (report.replayed, report.skipped)
        assert before == dump(engine)

    def test_dry_run_changes_nothing(self, engine, dead):
        """--dry-run lists what would be replayed."""
        before = dump(engine)
        report = dead.replay(Filter(), actor="ann", dry_run=True)
        assert ["d0", "d1", "d2"] == report.replayed
        assert before == dump(engine)

    def test_replay_all_in_batches_at_a_rate(self, queue, dead):
        """--all replays every dead letter, a batch at a time, paced."""
        report = dead.replay(Filter(), actor="ann", batch=2, rate=1000)
        assert ["d0", "d1", "d2"] == sorted(report.replayed)
        assert [] == dead.find()

    def test_replay_stops_when_asked(self, dead):
        """A stop request between jobs ends the replay; what was done stays done."""
        calls = []
        report = dead.replay(
            Filter(), actor="ann", should_stop=lambda: len(calls) >= 1, progress=calls.append
        )
        assert (1, True) == (len(report.replayed), report.stopped)
        assert 2 == len(dead.find())


def test_stats_count_pending_running_expired_failed_and_done(engine, queue):
    """saga stats: the figures of DESIGN.md §3 per queue."""
    for n in range(4):
        queue.enqueue(NewJob(id=f"n{n}", queue="q", kind="noop"))
    queue.enqueue(NewJob(id="later", queue="q", kind="noop", delay_seconds=3600))
    jobs = queue.claim(KINDS, batch=3)
    queue.complete([Done(jobs[0])])
    queue.fail(jobs[1], error="boom", error_class="permanent")
    expire_lease(engine, jobs[2].id)
    figures = collect(engine.db)["queues"]["q"]
    assert {
        "pending": 2,
        "due": 1,
        "running": 1,
        "expired_leases": 1,
        "failed": 1,
        "failed_by_reason": {"permanent": 1},
        "done": 1,
    }.items() <= figures.items()
    assert figures["oldest_pending_age_s"] >= 0
