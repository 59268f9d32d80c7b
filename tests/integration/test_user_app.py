"""
A user's own saga runs under the shipped CLI, on SQLite and PostgreSQL.

`--app MODULE:NAME` loads the application in every command, the worker's
processes included: its actions run, its timers fire, `verify` checks its
sagas, and an application with an action no step runs is refused at once.
"""

from __future__ import annotations

import pytest

from saga import Application, Engine, Registry, Step
from saga._queue import Queue
from saga.exceptions import ApplicationError
from tests.approval_app import app, approval
from tests.helpers import make_due
from tests.purchases import cli_json

APP = "tests.approval_app:app"


@pytest.fixture
def approvals(db_url):
    with Engine(db_url, app=app, check_schema=False) as setup:
        setup.upgrade()
    with Engine(db_url, app=app) as engine:
        yield engine


def worker(capsys, db_url, *extra):
    return cli_json(
        capsys, "worker", "--burst", "--app", APP, "--poll-interval", "0.1", "--db", db_url, *extra
    )


@pytest.mark.slow
def test_the_worker_runs_a_users_actions_and_timers(approvals, db_url, capsys):
    """The step runs, then the deadline fires: escalated, and nothing dead-lettered."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={"doc": "1"}).saga
    code, report = worker(capsys, db_url)
    assert (0, 0) == (code, report["dead_lettered"])
    result = Queue(approvals.db).result(f"step:{saga.id}:1:notify_reviewer")
    assert {"notified": f"reviewer of {saga.id}"} == result
    make_due(approvals, f"timer:{saga.id}:1")  # the review is overdue, by the database clock
    assert 0 == worker(capsys, db_url)[0]
    assert "escalated" == approvals.sagas.get(saga.id).state
    code, verdict = cli_json(capsys, "verify", "--app", APP, "--db", db_url)
    assert (0, True) == (code, verdict["ok"])
    assert "seats" not in {i["name"] for i in verdict["invariants"]}


def test_diagram_and_stats_speak_for_the_loaded_application(approvals, db_url, capsys):
    """Every command takes --app: the diagram is the user's machine."""
    code, diagram = cli_json(capsys, "diagram", "--app", APP)
    assert (0, "approval") == (code, diagram["kind"])
    approvals.sagas.start("approval", operation_id="doc-1", request={})
    code, stats = cli_json(capsys, "stats", "--app", APP, "--db", db_url)
    assert (0, {"submitted": 1}) == (code, stats["sagas"])


def test_an_action_without_a_step_and_a_step_without_an_action_are_refused(sqlite_url):
    """The application check lists every problem at once, before anything runs."""
    registry = Registry()
    registry.register(approval, steps={"notify_revewer": Step(lambda job: None)})
    with pytest.raises(ApplicationError) as refused:
        Engine(sqlite_url, app=Application(name="typo", registry=registry))
    assert [
        "saga 'approval': action 'notify_reviewer' has no step (register it with steps=...)",
        "saga 'approval': step 'approval.notify_revewer' runs no action of any state "
        "(declare it as one of its own jobs instead)",
    ] == list(refused.value.problems)


def test_a_bad_app_is_bad_input(sqlite_url, capsys):
    """--app naming nothing loadable exits 2 naming --app."""
    code, _ = cli_json(capsys, "stats", "--app", "tests.nowhere:app", "--db", sqlite_url)
    assert 2 == code
