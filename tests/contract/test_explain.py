"""`saga explain`: each verdict, from the engine's own rows, on each backend."""

from __future__ import annotations

import pytest

from saga import Application, Registry, Step
from saga.core.sagas.explain import explain
from saga.examples.approvals import approval
from saga.exceptions import NotFound
from saga.testing import SagaClock, run_due
from steps import PermanentError
from tests.helpers import engine_on
from tests.outbox_app import app as orders_app
from tests.purchases import cli_json


def _refuse(job):
    raise PermanentError("the reviewer's mailbox does not exist")


def approvals_with(step):
    registry = Registry()
    registry.register(approval, steps={"notify_reviewer": Step(step, max_attempts=1)})
    return Application(name="approvals", registry=registry)


@pytest.fixture
def approvals(db_url):
    with engine_on(db_url, approvals_with(lambda job: {"sent": True})) as engine:
        yield engine


def start(engine):
    return engine.sagas.start("approval", operation_id="doc-1", request={}).saga


def test_a_new_saga_has_work_due_and_a_timer(approvals):
    """Just started: its step is due now, its timer an hour later, in that order."""
    saga = start(approvals)
    told = explain(approvals.instances, saga.id).to_json()
    assert "work_pending" == told["verdict"]
    whats = [entry["what"] for entry in told["next"]]
    assert whats[0].startswith("approval.notify_reviewer is due now")
    assert "the timer fires: review_overdue" == whats[1]


def test_after_its_step_it_waits_for_its_timer(approvals):
    """The step ran: only the deadline is ahead."""
    saga = start(approvals)
    run_due(approvals)
    told = explain(approvals.instances, saga.id).to_json()
    assert ("waiting_for_timer", ["the timer fires: review_overdue"]) == (
        told["verdict"],
        [entry["what"] for entry in told["next"]],
    )


def test_a_final_saga_is_terminal(approvals):
    """Approved: final, nothing next."""
    saga = start(approvals)
    approvals.sagas.fire(saga.id, "approve", payload={"signature": "ann"}, actor="ann")
    run_due(approvals)
    SagaClock(approvals.db).advance(3601)
    run_due(approvals)
    told = explain(approvals.instances, saga.id).to_json()
    assert ("terminal", []) == (told["verdict"], told["next"])
    assert told["reasons"][0] == "approved is a final state of approval"


def test_a_step_that_gave_up_is_named_with_its_error(db_url):
    """A dead letter: the verdict says it gave up, the reason names the job and the error."""
    with engine_on(db_url, approvals_with(_refuse)) as engine:
        saga = start(engine)
        run_due(engine)
        told = explain(engine.instances, saga.id).to_json()
    assert "gave_up" == told["verdict"]
    assert any(
        reason.startswith(f"dead letter step:{saga.id}:1:notify_reviewer")
        and "mailbox does not exist" in reason
        for reason in told["reasons"]
    )


def test_a_saga_nothing_will_move_is_stuck(db_url):
    """An order placed, with no timeout and no action: stuck, and why."""
    with engine_on(db_url, orders_app()) as engine:
        saga = engine.sagas.start(
            "order", operation_id="o1", request={"customer_id": "c", "total": 1}
        ).saga
        told = explain(engine.instances, saga.id).to_json()
    assert "stuck" == told["verdict"]
    assert any("no job, timer or open item will move it" in r for r in told["reasons"])
    assert {"unpublished": 1, "published": 0, "dead": 0} == told["events"]


def test_explain_an_unknown_saga_is_not_found(approvals, db_url, capsys):
    """An unknown id: NotFound, and exit 4 from the CLI."""
    with pytest.raises(NotFound):
        explain(approvals.instances, "nope")
    code, _ = cli_json(
        capsys, "explain", "nope", "--db", db_url, "--app", "saga.examples.approvals:app"
    )
    assert 4 == code
