"""Definition versions: two versions of one kind in one application, on each backend."""

from __future__ import annotations

import dataclasses

import pytest

from saga import Application, Engine, Machine, Registry, State, Step, Transition
from saga.exceptions import ApplicationError
from saga.ops import verify
from saga.testing import SagaClock, history_problems, run_due
from tests.helpers import engine_on, execute, rows, scalar
from tests.versions_app import DONE, LEAVE_V1, LEAVE_V2, app

pytestmark = pytest.mark.timeout(120)


def start(engine, n, prefix="op"):
    return [
        engine.sagas.start("leave", operation_id=f"{prefix}-{i}", request={}).saga.id
        for i in range(n)
    ]


@pytest.fixture
def v1_sagas(db_url):
    """Four requests made while only version 1 existed, one approved and booked: steps ran."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        ids = start(engine, 4)
        engine.sagas.fire(ids[0], "approve", actor="ann")
        run_due(engine)
    return ids


def test_new_sagas_start_on_the_newest_and_old_ones_keep_their_version(db_url, v1_sagas):
    """Version 2 deployed beside 1: a new request is on v2; the old ones stay on v1."""
    with engine_on(db_url, app()) as engine:
        (new,) = start(engine, 1, prefix="new")
        assert 2 == engine.sagas.get(new).definition_version
        assert {1} == {engine.sagas.get(saga_id).definition_version for saga_id in v1_sagas}
        assert ["v2", "v1"] == [f"v{s.definition_version}" for s in engine.instances.list()[:2]]


def test_v1_sagas_run_their_steps_and_timers_on_v1(db_url, v1_sagas):
    """A v1 step and a v1 timer act by v1's machine: booked; expired (v2 would escalate)."""
    DONE.clear()
    with engine_on(db_url, app()) as engine:
        engine.sagas.fire(v1_sagas[1], "approve", actor="ann")
        SagaClock(engine.db).advance(3601)
        run_due(engine)
        assert f"book:{v1_sagas[1]}:v1" in DONE
        states = {saga_id: engine.sagas.get(saga_id) for saga_id in v1_sagas}
        assert ["booked", "booked", "expired", "expired"] == [s.state for s in states.values()]
        assert {1} == {s.definition_version for s in states.values()}
        history = engine.sagas.history(v1_sagas[2])
        assert [("expire", 1)] == [(h.event, h.definition_version) for h in history[1:]]
        assert verify(engine).ok
        assert [] == history_problems(engine, v1_sagas)


def test_one_step_serves_every_version_that_lists_its_action(db_url):
    """book is one job kind, leave.book, whichever version queued it."""
    with engine_on(db_url, app()) as engine:
        names = [kind.name for kind in engine.step_kinds()]
        assert 1 == names.count("leave.book")


def test_two_versions_running_one_action_differently_are_refused(sqlite_url):
    """A job names its action, not its version: two steps for it are refused, naming both."""
    registry = Registry()
    registry.register(LEAVE_V1, steps={a: Step(lambda job: {}) for a in ("notify_manager", "book")})
    registry.register(
        LEAVE_V2,
        steps={
            a: Step(lambda job: {"v": 2})
            for a in ("notify_manager", "notify_director", "notify_hr", "book")
        },
    )
    with pytest.raises(ApplicationError) as refused:
        Engine(sqlite_url, app=Application(name="leave", registry=registry))
    assert any(
        "versions 1 and 2 run action 'book' with different steps" in p
        for p in refused.value.problems
    )


def test_retiring_a_version_with_live_sagas_is_refused_with_the_count(db_url, v1_sagas):
    """Only v2 registered while v1 sagas run: refused, naming v1, its count and its states."""
    with engine_on(db_url, app()):
        pass
    retired = app(versions=(2,), migrations=())
    with Engine(db_url, app=retired) as engine, pytest.raises(ApplicationError) as refused:
        engine.sagas.get(v1_sagas[0])
    (problem,) = refused.value.problems
    assert problem.startswith(
        "saga 'leave' version 1 still has 3 live saga(s) (requested: 3) "
        "but the application no longer registers it (it registers v2)"
    )
    assert "saga migrate apply leave --to 2" in problem


def test_finished_sagas_do_not_hold_a_version_back(db_url, v1_sagas):
    """Every v1 saga finished: v1 may go."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        for saga_id in v1_sagas[1:]:
            engine.sagas.fire(saga_id, "reject", actor="ann")
        run_due(engine)  # the approved one is booked
        assert "booked" == engine.sagas.get(v1_sagas[0]).state
    with engine_on(db_url, app(versions=(2,), migrations=())) as engine:
        assert "rejected" == engine.sagas.get(v1_sagas[1]).state
        assert verify(engine).ok  # v1's history is history: nothing left to read it by


def test_a_newer_version_unknown_here_is_a_fleet_mid_upgrade(db_url):
    """v2 sagas exist, this application registers only v1: allowed (v2's workers run them)."""
    with engine_on(db_url, app()) as engine:
        (saga_id,) = start(engine, 1)
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        assert 2 == engine.sagas.get(saga_id).definition_version


def test_another_applications_kind_is_none_of_its_business(db_url, v1_sagas):
    """An application without the leave kind at all opens on a database with live leaves."""
    other = Registry()
    other.register(
        Machine(
            "noop",
            states=[State("open", initial=True), State("done", terminal=True)],
            transitions=[Transition("close", source="open", target="done")],
        )
    )
    with engine_on(db_url, Application(name="other", registry=other)) as engine:
        assert "requested" == engine.sagas.get(v1_sagas[1]).state


def test_sagas_finished_before_0016_are_marked_when_their_definition_is_registered(
    db_url, v1_sagas
):
    """finished_at cleared (rows of an older release): the next open marks them again."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        engine.sagas.fire(v1_sagas[1], "reject", actor="ann")
        execute(engine, "UPDATE sagas SET finished_at = NULL")
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        engine.sagas.get(v1_sagas[0])  # its first transaction opens the application
        finished = rows(engine, "SELECT id FROM sagas WHERE finished_at IS NOT NULL ORDER BY id")
        assert sorted([v1_sagas[0], v1_sagas[1]]) == [row["id"] for row in finished]


def test_transitions_record_the_definition_they_were_made_under(db_url, v1_sagas):
    """Each audit row names its definition version (migration 0016's column)."""
    with engine_on(db_url, app()) as engine:
        (new,) = start(engine, 1, prefix="new")
        made = rows(
            engine,
            "SELECT saga_id, definition_version FROM saga_transitions WHERE saga_id IN (:a, :b)",
            a=new,
            b=v1_sagas[0],
        )
        assert {(new, 2), (v1_sagas[0], 1)} == {
            (r["saga_id"], r["definition_version"]) for r in made
        }
        assert 0 == scalar(
            engine, "SELECT count(*) FROM saga_transitions WHERE definition_version IS NULL"
        )


def test_explain_and_show_name_the_definition(db_url, v1_sagas):
    """explain's JSON and a history entry carry the definition version."""
    from saga.core.sagas.explain import explain

    with engine_on(db_url, app()) as engine:
        told = explain(engine.instances, v1_sagas[1]).to_json()
        assert 1 == told["definition_version"]
        shown = engine.instances.show(v1_sagas[1]).to_json()
        assert [1] == [entry["definition_version"] for entry in shown["history"]]


def test_the_v1_application_alone_still_runs(db_url):
    """A single version is the ordinary case: nothing about versions shows."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        start(engine, 2)
        run_due(engine)
        assert verify(engine).ok
        assert dataclasses.replace(engine.app, migrations=()).migrations == ()
