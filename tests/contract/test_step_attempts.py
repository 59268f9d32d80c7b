"""
Contract: a step's `max_attempts` is its limit, on SQLite and on PostgreSQL.

`Step(max_attempts=5)` runs a failing step five times before its job becomes a
dead letter, whether the step is given as a `Step` or built by a factory for
the engine; a saga kind registered with a lower ceiling is refused, never
capped silently.  The backoff is moved past with the database clock of the
test helpers (`make_due`), never slept through.
"""

from __future__ import annotations

import pytest

from saga import Application, Registry, Step
from saga.core.queue.backoff import Backoff
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.examples.approvals import app as approval_app
from saga.examples.approvals import approval
from saga.exceptions import ApplicationError
from steps.errors import TransientError
from tests.helpers import engine_on, make_due, rows

FAST = Backoff(base=0.001, cap=0.001)


class Flaky:
    """A step whose call always fails transiently; it counts its attempts."""

    def __init__(self) -> None:
        self.attempts: list[int] = []

    def __call__(self, job):
        self.attempts.append(job.attempt)
        raise TransientError("the reviewer's mail server answered 503")


def approvals(steps, **options) -> Application:
    registry = Registry()
    registry.register(approval, steps=steps, **options)
    return Application(name="approvals", registry=registry)


def run_until_settled(engine) -> None:
    """Run the worker, moving each retry's backoff into the past, until nothing is pending."""
    worker = Worker(engine.db, builtin_handlers(engine), listen=False, poll_interval=0.01)
    for _ in range(20):
        worker.run_once()
        pending = rows(
            engine, "SELECT id FROM jobs WHERE state = 'pending' AND kind <> 'saga.timeout'"
        )
        if not pending:
            return
        for row in pending:
            make_due(engine, row["id"])
    raise AssertionError("the step's job never settled")


def step_job(engine) -> dict:
    [job] = rows(engine, "SELECT * FROM jobs WHERE kind = 'approval.notify_reviewer'")
    return job


def test_a_step_of_five_attempts_runs_five_times_then_is_a_dead_letter(db_url):
    """Step(max_attempts=5): five attempts, the job accepted with 5, then failed."""
    flaky = Flaky()
    app = approvals({"notify_reviewer": Step(flaky, max_attempts=5, backoff=FAST)})
    with engine_on(db_url, app) as engine:
        engine.sagas.start("approval", operation_id="doc-1", request={})
        assert 5 == step_job(engine)["max_attempts"]
        run_until_settled(engine)
        job = step_job(engine)
    assert [1, 2, 3, 4, 5] == flaky.attempts
    assert ("failed", 5, 5) == (job["state"], job["attempts"], job["max_attempts"])
    assert job["last_error"].startswith("gave up after 5 attempt(s)")


def test_a_factorys_step_of_five_attempts_runs_five_times(db_url):
    """The factory form (steps=lambda ctx: …): the kind's figure is learnt by the engine."""
    flaky = Flaky()

    def steps(ctx):
        return [Step(flaky, max_attempts=5, backoff=FAST).kind("approval", "notify_reviewer")]

    with engine_on(db_url, approvals(steps)) as engine:
        engine.sagas.start("approval", operation_id="doc-1", request={})
        run_until_settled(engine)
        job = step_job(engine)
    assert [1, 2, 3, 4, 5] == flaky.attempts
    assert ("failed", 5, 5) == (job["state"], job["attempts"], job["max_attempts"])


def test_a_step_of_one_attempt_is_not_raised_to_a_default(db_url):
    """Fewer than the old default holds too: Step(max_attempts=1) runs once."""
    flaky = Flaky()
    app = approvals({"notify_reviewer": Step(flaky, max_attempts=1, backoff=FAST)})
    with engine_on(db_url, app) as engine:
        engine.sagas.start("approval", operation_id="doc-1", request={})
        run_until_settled(engine)
        job = step_job(engine)
    assert [1] == flaky.attempts
    assert ("failed", 1) == (job["state"], job["max_attempts"])


def test_a_ceiling_below_a_step_is_refused_not_applied(sqlite_url):
    """register(max_attempts=3) under Step(max_attempts=5): the application is refused."""
    app = approvals({"notify_reviewer": Step(Flaky(), max_attempts=5)}, max_attempts=3)
    with pytest.raises(ApplicationError) as refused, engine_on(sqlite_url, app):
        pass
    assert "step 'approval.notify_reviewer' asks for 5 attempts" in str(refused.value)
    assert "max_attempts=3" in str(refused.value)


def test_a_ceiling_at_or_above_the_step_is_accepted(sqlite_url):
    """A ceiling the steps stay under changes nothing: the step's figure is kept."""
    app = approvals({"notify_reviewer": Step(Flaky(), max_attempts=5)}, max_attempts=5)
    with engine_on(sqlite_url, app) as engine:
        engine.sagas.start("approval", operation_id="doc-1", request={})
        assert 5 == step_job(engine)["max_attempts"]


def test_the_readmes_approval_step_is_accepted_with_its_five_attempts(db_url):
    """The README's own example (saga.examples.approvals): Step(max_attempts=5) suffices."""
    with engine_on(db_url, approval_app) as engine:
        engine.sagas.start("approval", operation_id="doc-1", request={})
        assert 5 == step_job(engine)["max_attempts"]
