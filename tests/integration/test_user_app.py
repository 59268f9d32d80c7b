"""
A user's own saga runs under the shipped CLI, on SQLite and PostgreSQL.

`--app MODULE:NAME` loads the application in every command, the worker's
processes included: its actions run, its timers fire, `verify` checks its
sagas, and an application with an action no step runs is refused at once.
"""

from __future__ import annotations

import pytest

from saga import Application, Engine, Registry, Step
from saga.core.queue.leases import Queue
from saga.examples.approvals import app, approval
from saga.exceptions import ApplicationError
from tests import schemas
from tests.helpers import make_due
from tests.purchases import cli_json

APP = "saga.examples.approvals:app"


@pytest.fixture
def approvals(db_url):
    with Engine(db_url, app=app, check_schema=False) as setup:
        schemas.migrate(setup)
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


class TestInstances:
    def test_list_show_and_stuck(self, approvals, db_url, capsys):
        """list by kind and state; show has history, jobs, timers; --stuck finds the waiting."""
        saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
        code, listed = cli_json(
            capsys, "instances", "list", "--kind", "approval", "--app", APP, "--db", db_url
        )
        assert (0, [saga.id], [False]) == (
            code,
            [s["id"] for s in listed],
            [s["terminal"] for s in listed],
        )
        code, shown = cli_json(capsys, "instances", "show", saga.id, "--app", APP, "--db", db_url)
        assert 0 == code
        assert ["start"] == [h["event"] for h in shown["history"]]
        assert [f"step:{saga.id}:1:notify_reviewer"] == [j["id"] for j in shown["jobs"]]
        assert [f"timer:{saga.id}:1"] == [t["id"] for t in shown["timers"]]
        assert ([], []) == (shown["dead_letters"], shown["reconciliation"])
        stuck = ("instances", "list", "--stuck", "--app", APP, "--db", db_url)
        assert [] == cli_json(capsys, *stuck)[1]  # its step and timer are pending
        approvals.db.transaction(
            lambda tx: tx.execute_sql("DELETE FROM jobs")  # work lost, by hand
        )
        assert [saga.id] == [s["id"] for s in cli_json(capsys, *stuck)[1]]

    def test_an_operators_event_is_audited_and_refusals_exit_3(self, approvals, db_url, capsys):
        """fire takes a declared event with who and why; an undeclared one exits 3."""
        saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
        base = ("--app", APP, "--db", db_url, "--actor", "ann", "--reason", "signed on paper")
        code, _ = cli_json(capsys, "instances", "fire", saga.id, "approve", *base)
        assert 3 == code  # the guard wants a signature
        code, moved = cli_json(
            capsys,
            "instances",
            "fire",
            saga.id,
            "approve",
            "--payload",
            '{"signature": "ann"}',
            *base,
        )
        assert (0, "approved") == (code, moved["state"])
        last = moved["history"][-1]
        assert ("operator:ann", "signed on paper") == (last["actor"], last["cause"])
        code, _ = cli_json(capsys, "instances", "cancel", saga.id, *base)
        assert 2 == code  # approvals declare no cancel event (bad input, not a conflict)

    def test_cancel_takes_the_kinds_cancel_transition(self, engine, db_url, capsys):
        """A purchase cancelled through instances: its declared cancel transition."""
        engine.services.catalogue.add("js", seats=1, price="10.00", currency="EUR")
        purchase = engine.services.purchases.start(
            operation_id="op-1", intensive_id="js", student_id="s1", hold_seconds=600
        ).purchase
        code, moved = cli_json(
            capsys,
            "instances",
            "cancel",
            purchase.id,
            "--actor",
            "ann",
            "--reason",
            "asked by phone",
            "--db",
            db_url,
        )
        assert (0, "cancelled") == (code, moved["state"])
        assert 1 == engine.services.catalogue.get("js").free

    def test_bad_payload_and_unknown_ids(self, approvals, db_url, capsys):
        """A payload that is not a JSON object exits 2; an unknown saga exits 4."""
        saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
        base = ("--app", APP, "--db", db_url, "--actor", "ann", "--reason", "r")
        assert (
            2
            == cli_json(capsys, "instances", "fire", saga.id, "approve", "--payload", "[1]", *base)[
                0
            ]
        )
        assert 4 == cli_json(capsys, "instances", "show", "nope", "--app", APP, "--db", db_url)[0]


def test_stats_carry_the_applications_own_figures(engine, db_url, capsys):
    """The purchase adds its seats per intensive to saga stats; another app, its name."""
    engine.services.catalogue.add("js", seats=3, price="10.00", currency="EUR")
    code, stats = cli_json(capsys, "stats", "--db", db_url)
    assert (0, "purchase") == (code, stats["application"]["name"])
    assert {"held": 0, "taken": 0, "free": 3} == stats["application"]["intensives"]["js"]
