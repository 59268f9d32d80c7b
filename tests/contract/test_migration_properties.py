"""
The property of migrations (issue 23, item 7), on a small machine of the test's own.

Random populations of v1 sagas in every live state (their entry steps done,
running or still pending), a random plan that passes the check, applied in
random batches with crashes at random batch boundaries, resumed until done.
Afterwards every live saga is on v2 in its mapped state, its timer and its
jobs are exactly what v2 derives (the actions still due), a job running
before the migration cannot complete, finished sagas stayed on v1, nobody
moved twice, and `saga verify` is green.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saga import Application, Engine, Machine, Migration, Registry, State, Step, Timeout, Transition
from saga.core.queue.values import Done
from saga.core.sagas import migrations as migrations_module
from saga.core.sagas.plans import hook_reason
from saga.ops import verify
from saga.queue import Queue
from saga.sagas import MIGRATED
from saga.testing import history_problems
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import rows, scalar

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

V1 = Machine(
    "ticket",
    version=1,
    states=[
        State("open", initial=True, actions=("assign",), timeout=Timeout("nudge", seconds=600)),
        State("assigned", actions=("notify",)),
        State("waiting", timeout=Timeout("close", seconds_from="wait_s")),
        State("closed", terminal=True),
        State("cancelled", terminal=True),
    ],
    transitions=[
        Transition("assign", source="open", target="assigned"),
        Transition("nudge", source="open", target="waiting"),
        Transition("park", source="assigned", target="waiting"),
        Transition("resume", source="waiting", target="assigned"),
        Transition("close", source="waiting", target="closed"),
        Transition("cancel", source=("open", "assigned", "waiting"), target="cancelled"),
    ],
)
V2 = Machine(
    "ticket",
    version=2,
    states=[
        State(
            "open",
            initial=True,
            actions=("assign", "triage"),
            timeout=Timeout("nudge", seconds=300),
        ),
        State("assigned", actions=("notify",), meta={"owner": "agent"}),
        State("waiting", timeout=Timeout("close", seconds=900, since="created")),
        State("review", actions=("review",)),
        State("closed", terminal=True),
        State("cancelled", terminal=True),
    ],
    transitions=[
        Transition("assign", source=("open", "review"), target="assigned"),
        Transition("nudge", source="open", target="waiting"),
        Transition("park", source="assigned", target="waiting"),
        Transition("resume", source="waiting", target="assigned"),
        Transition("review", source=("assigned", "waiting"), target="review"),
        Transition("close", source=("waiting", "review"), target="closed"),
        Transition("cancel", source=("open", "assigned", "waiting", "review"), target="cancelled"),
    ],
)
LIVE = ("open", "assigned", "waiting")
# How a v1 saga gets to each state it is drawn in.
ROUTES = {
    "open": (),
    "assigned": ("assign",),
    "waiting": ("assign", "park"),
    "cancelled": ("cancel",),
}
ACTIONS = ("assign", "notify", "triage", "review")
HOOKED: list[str] = []


def hook(tx, before, after):
    del tx
    HOOKED.append(before.id)


def application(migration: Migration | None) -> Application:
    registry = Registry()
    steps = {action: Step(lambda job: {"done": True}) for action in ACTIONS}
    for machine in (V1, V2) if migration else (V1,):
        mine = {a for s in machine.states for a in s.actions}
        registry.register(machine, steps={a: step for a, step in steps.items() if a in mine})
    return Application(
        name="tickets", registry=registry, migrations=(migration,) if migration else ()
    )


class Crash(Exception):
    """A crash at a batch boundary, in this process."""


@st.composite
def scenarios(draw):
    targets = st.sampled_from(("open", "assigned", "waiting", "review", "closed"))
    # The same state as often as any other: where re-deriving must not repeat finished work.
    mapping = {state: draw(st.just(state) | targets, label=f"{state} ->") for state in LIVE}
    needed = {s for s, t in mapping.items() if hook_reason(V1.state(s), V2.state(t)) is not None}
    extra = draw(st.sets(st.sampled_from(LIVE)), label="extra hooks")
    population = {
        state: draw(st.integers(0, 4), label=f"sagas {state}") for state in (*LIVE, "cancelled")
    }
    return {
        "mapping": mapping,
        "hooks": needed | extra,
        "population": population,
        "jobs": draw(
            st.lists(st.sampled_from(("done", "running", "pending")), min_size=8, max_size=20)
        ),
        "batch": draw(st.integers(1, 5), label="batch"),
        "crashes": draw(st.sets(st.integers(1, 8), max_size=4), label="crash at boundaries"),
    }


def run_scenario(url: str, scenario: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    mapping = scenario["mapping"]
    migration = Migration(
        "ticket", 1, 2, states=mapping, hooks=dict.fromkeys(scenario["hooks"], hook)
    )
    assert [] == migration.problems(application(migration).registry)
    with Engine(url, app=application(None), check_schema=False) as setup:
        setup.upgrade()
    before: dict[str, str] = {}
    versions: dict[str, int] = {}
    with Engine(url, app=application(None)) as engine:
        for state, n in scenario["population"].items():
            for i in range(n):
                saga_id = engine.sagas.start(
                    "ticket", operation_id=f"{state}-{i}", request={"wait_s": 120}
                ).saga.id
                for event in ROUTES[state]:
                    engine.sagas.fire(saga_id, event, actor="test")
                before[saga_id] = state
                versions[saga_id] = engine.sagas.get(saga_id).version
        queue = Queue(engine.db)
        claimed = queue.claim([f"ticket.{a}" for a in ACTIONS], batch=100)
        fates = list(zip(claimed, [*scenario["jobs"], *["pending"] * len(claimed)], strict=False))
        queue.complete([Done(job, {"done": True}) for job, fate in fates if fate == "done"])
        queue.release([job for job, fate in fates if fate == "pending"])
        running = [
            job
            for job, fate in fates
            if fate == "running" and before[job.payload["saga_id"]] in LIVE
        ]
        unfinished = {row["id"] for row in rows(engine, "SELECT id FROM jobs")}

    boundaries = {"n": 0}

    def crash_point(name: str) -> None:
        boundaries["n"] += 1
        if boundaries["n"] in scenario["crashes"]:
            raise Crash(name)

    monkeypatch.setattr(migrations_module, "crash_point", crash_point)
    HOOKED.clear()
    with Engine(url, app=application(migration)) as engine:
        for _ in range(20):
            try:
                engine.migrations.apply(
                    "ticket", 2, batch=scenario["batch"], actor="prop", reason="v2"
                )
                break
            except Crash:
                continue
        live = {saga_id: state for saga_id, state in before.items() if state in LIVE}
        for saga_id, state in before.items():
            saga = engine.sagas.get(saga_id)
            if state not in LIVE:
                assert (1, state) == (saga.definition_version, saga.state)
                continue
            target = V2.state(mapping[state])
            assert (2, target.name) == (saga.definition_version, saga.state), saga_id
            current = f"step:{saga_id}:{versions[saga_id]}:"
            old_jobs = {j.removeprefix(current) for j in unfinished if j.startswith(current)}
            due = [a for a in target.actions if a not in V1.state(state).actions or a in old_jobs]
            expected = {f"step:{saga_id}:{saga.version}:{a}" for a in due}
            if target.timeout is not None:
                expected.add(f"timer:{saga_id}:{saga.version}")
                since = saga.created_at if target.timeout.since == "created" else saga.entered_at
                assert saga.deadline_at == since + timedelta(seconds=target.timeout.seconds or 0)
            else:
                assert saga.deadline_at is None
            found = rows(engine, "SELECT id FROM jobs WHERE saga_id = :s", s=saga_id)
            assert expected == {row["id"] for row in found}, (state, target.name)
        assert len(live) == scalar(
            engine, "SELECT count(*) FROM saga_transitions WHERE event = :e", e=MIGRATED
        )
        hooked = {s for s, state in live.items() if state in scenario["hooks"]}
        assert hooked == set(HOOKED)
        assert set() == Queue(engine.db).complete([Done(job, {"late": True}) for job in running])
        report = verify(engine)
        assert report.ok, [p for i in report.invariants for p in i.problems][:5]
        assert [] == history_problems(engine, before)


@pytest.mark.parametrize(("backend", "examples"), [("sqlite", 40), ("postgres", 8)])
def test_any_checked_plan_moves_every_live_saga_once_with_its_work_re_derived(
    backend, examples, monkeypatch
):
    if backend == "postgres":
        require_postgres()

    @settings(max_examples=examples, deadline=None)
    @given(scenarios())
    def prop(scenario):
        if backend == "postgres":
            schema = PostgresSchema()
            try:
                run_scenario(schema.url, scenario, monkeypatch)
            finally:
                schema.drop()
        else:
            with tempfile.TemporaryDirectory() as folder:
                run_scenario(f"sqlite:///{Path(folder) / 'p.db'}", scenario, monkeypatch)

    prop()
