"""
Stateful property test: the queue against a pure model, on each backend.

Random acceptances (repeats and conflicts), claims, completions, failures,
retries, extensions, releases, lease expiries (the database clock moved for
one job) and operations under stale tokens; after every step each job's
state and attempts match the model, and results exist only for done jobs.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from saga import Engine
from saga.core.queue.leases import Queue
from saga.core.queue.values import Done
from saga.exceptions import JobConflict
from saga.queue import NewJob
from tests import schemas
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import expire_lease, scalar

IDS = ["a", "b", "c", "d"]
MAX_ATTEMPTS = 2


class QueueModel(RuleBasedStateMachine):
    make_url = None

    @initialize()
    def open(self):
        self.url, self.cleanup = type(self).make_url()
        with Engine(self.url, check_schema=False) as setup:
            schemas.migrate(setup)
        self.engine = Engine(self.url)
        self.queue = Queue(self.engine.db)
        self.model = {}  # id -> dict(payload, state, attempts, token, expired)
        self.current = {}  # id -> Job of the latest claim
        self.stale = []  # Jobs of earlier claims
        self.results = set()

    def teardown(self):
        if hasattr(self, "engine"):
            self.engine.close()
            self.cleanup()

    # -- rules ---------------------------------------------------------------------

    @rule(job_id=st.sampled_from(IDS), course=st.sampled_from(["JavaScript", "Markdown"]))
    def accept(self, job_id, course):
        job = NewJob(
            id=job_id,
            queue="q",
            kind="export",
            payload={"course": course},
            max_attempts=MAX_ATTEMPTS,
        )
        known = self.model.get(job_id)
        if known is not None and known["payload"] != course:
            with pytest.raises(JobConflict):
                self.queue.enqueue(job)
            return
        accepted = self.queue.enqueue(job)
        if known is None:
            assert accepted.created
            self.model[job_id] = {
                "payload": course,
                "state": "pending",
                "attempts": 0,
                "token": None,
                "expired": False,
                "rescued": False,
            }
        else:
            assert not accepted.created
            assert known["state"] == accepted.job.state

    @rule()
    def claim(self):
        expired = {i for i, m in self.model.items() if m["state"] == "running" and m["expired"]}
        exhausted = {i for i in expired if self.model[i]["attempts"] >= MAX_ATTEMPTS}
        takeover = expired - exhausted
        pending = {i for i, m in self.model.items() if m["state"] == "pending"}
        jobs = self.queue.claim(["export"], batch=10, lease_seconds=600)
        for job_id in exhausted:
            self.model[job_id].update(state="failed", token=None, expired=False)
        first_time = {i for i in takeover if not self.model[i]["rescued"]}
        if first_time:
            # A killed worker's jobs come back together the first time...
            assert first_time == {job.id for job in jobs}
        elif takeover:
            # ...and alone once they expired before (maybe they kill their worker).
            assert 1 == len(jobs)
            assert jobs[0].id in takeover
        else:
            assert pending == {job.id for job in jobs}
        for job in jobs:
            model = self.model[job.id]
            model.update(
                state="running",
                attempts=model["attempts"] + 1,
                token=job.token,
                expired=False,
                rescued=bool(takeover),
            )
            assert model["attempts"] == job.attempt
            if job.id in self.current:
                self.stale.append(self.current[job.id])
            self.current[job.id] = job

    def _owned(self, job):
        model = self.model[job.id]
        return model["state"] == "running" and model["token"] == job.token and not model["expired"]

    def _pick(self, data, stale):
        pool = self.stale if stale else list(self.current.values())
        if not pool:
            return None
        return data.draw(st.sampled_from(pool))

    @rule(data=st.data(), stale=st.booleans())
    def complete(self, data, stale):
        job = self._pick(data, stale)
        if job is None:
            return
        owned = self._owned(job)
        assert owned == (job.id in self.queue.complete([Done(job, {"by": job.token})]))
        if owned:
            self.model[job.id].update(state="done", token=None)
            self.results.add(job.id)

    @rule(data=st.data(), stale=st.booleans())
    def fail(self, data, stale):
        job = self._pick(data, stale)
        if job is None:
            return
        owned = self._owned(job)
        assert owned == self.queue.fail(job, error="boom", error_class="permanent")
        if owned:
            self.model[job.id].update(state="failed", token=None)

    @rule(data=st.data(), stale=st.booleans())
    def retry(self, data, stale):
        job = self._pick(data, stale)
        if job is None or job.last_attempt:
            return
        owned = self._owned(job)
        assert owned == self.queue.retry(job, delay=0, error="later", error_class="transient")
        if owned:
            self.model[job.id].update(state="pending", token=None, rescued=False)

    @rule(data=st.data(), stale=st.booleans())
    def extend(self, data, stale):
        job = self._pick(data, stale)
        if job is None:
            return
        assert self._owned(job) == (job.id in self.queue.extend([job], lease_seconds=600))

    @rule(data=st.data(), stale=st.booleans())
    def release(self, data, stale):
        job = self._pick(data, stale)
        if job is None:
            return
        owned = self._owned(job)
        assert owned == (job.id in self.queue.release([job]))
        if owned:
            model = self.model[job.id]
            model.update(state="pending", token=None, attempts=model["attempts"] - 1)

    @rule(job_id=st.sampled_from(IDS))
    def lease_expires(self, job_id):
        model = self.model.get(job_id)
        if model is None or model["state"] != "running":
            return
        expire_lease(self.engine, job_id)
        model["expired"] = True

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def jobs_match_the_model(self):
        if not hasattr(self, "queue"):
            return
        for job_id, model in self.model.items():
            info = self.queue.get(job_id)
            assert (model["state"], model["attempts"]) == (info.state, info.attempts), job_id

    @invariant()
    def results_exist_only_for_completed_jobs(self):
        if not hasattr(self, "queue"):
            return
        assert len(self.results) == scalar(self.engine, "SELECT count(*) FROM job_results")
        for job_id in self.results:
            assert "done" == self.queue.get(job_id).state


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_queue_matches_its_model(backend, tmp_path_factory):
    """The queue never disagrees with the model, whatever the interleaving."""
    if backend == "postgres":
        require_postgres()

        def make():
            schema = PostgresSchema()
            return schema.url, schema.drop
    else:

        def make():
            folder = tmp_path_factory.mktemp("queue")
            return f"sqlite:///{folder}/saga.db", lambda: None

    machine = type(f"QueueModel_{backend}", (QueueModel,), {"make_url": staticmethod(make)})
    run_state_machine_as_test(
        machine, settings=settings(max_examples=30, stateful_step_count=40, deadline=None)
    )
