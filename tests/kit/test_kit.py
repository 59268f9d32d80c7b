"""saga.testing on the README's approval saga, and on broken machines it must catch."""

from __future__ import annotations

import time

import psycopg
import pytest
from hypothesis import strategies as st

from saga import Machine, State, Timeout, Transition
from saga.examples.approvals import app
from saga.testing import run_saga_test
from tests.conftest import POSTGRES_URL, require_postgres

SIGNATURES = {"approve": st.sampled_from([{"signature": "ann"}, {"signature": ""}, {}])}


@pytest.mark.slow
def test_the_approval_saga_passes_the_kit():
    """Random starts, events, stale versions, clock jumps, due work, crashing steps: all hold."""
    started = time.monotonic()
    run_saga_test(app, payloads=SIGNATURES, max_examples=25)
    print(f"approval: {time.monotonic() - started:.1f} s")


@pytest.mark.slow
@pytest.mark.postgres
def test_the_kit_runs_on_postgresql_by_url():
    """The same test on PostgreSQL: a schema per example, none left behind."""
    require_postgres()
    before = kit_schemas()
    run_saga_test(app, payloads=SIGNATURES, url=POSTGRES_URL, max_examples=10)
    # Only this run's: a schema another run left (killed mid-way) is not this one's.
    assert set() == kit_schemas() - before


def kit_schemas():
    with psycopg.connect(POSTGRES_URL.replace("+psycopg", ""), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schema_name FROM information_schema.schemata "
            "WHERE schema_name LIKE 'saga_test_%'"
        ).fetchall()
    return {row[0] for row in rows}


# -- machines the kit must catch ---------------------------------------------------


class LeakyMachine(Machine):
    """A machine whose decide() lets the terminal 'closed' move on 'reopen' (a seeded bug)."""

    def decide(self, state, event, data=None, payload=None):
        if state == "closed" and event == "reopen":
            return Transition("reopen", source="closed", target="open", compensation=True)
        return super().decide(state, event, data or {}, payload or {})


def leaky():
    return LeakyMachine(
        "ticket",
        states=[State("open", initial=True), State("closed", terminal=True)],
        transitions=[
            Transition("close", source="open", target="closed"),
            Transition("reopen", source="open", target="open"),
        ],
    )


def nagging():
    """A reminder re-armed from creation: once due, it fires again at once (a seeded bug)."""
    return Machine(
        "reminder",
        states=[
            State("waiting", initial=True, timeout=Timeout("nudge", seconds=30, since="created")),
            State("done", terminal=True),
        ],
        transitions=[
            Transition("nudge", source="waiting", target="waiting"),
            Transition("finish", source="waiting", target="done"),
        ],
    )


def steps_of(failure):
    """The CLI-like lines of the falsifying example, as hypothesis reported it."""
    return [
        line
        for line in getattr(failure.value, "__notes__", [])
        if line.startswith(("saga instances ", "saga worker", "# the clock", "# the next step"))
    ]


@pytest.mark.slow
def test_the_kit_catches_a_terminal_state_that_moves():
    """The leaky machine is found, and shrunk to start, close, reopen."""
    with pytest.raises(AssertionError, match="left the terminal state closed") as failure:
        run_saga_test(leaky(), max_examples=200)
    lines = steps_of(failure)
    assert lines[0].startswith("saga instances start ticket")
    assert any(" close " in line for line in lines)
    assert " reopen " in lines[-1]
    assert len(lines) <= 4, lines


@pytest.mark.slow
def test_the_kit_catches_a_timer_that_fires_twice():
    """The nagging reminder is found: one deadline, fired twice, in the shortest story."""
    with pytest.raises(AssertionError, match="fired twice") as failure:
        run_saga_test(nagging(), max_examples=200)
    lines = steps_of(failure)
    assert lines[0].startswith("saga instances start reminder")
    assert "# the clock moves 31 s" in lines
    assert lines[-1] == "saga worker --burst"
    assert len(lines) <= 4, lines
