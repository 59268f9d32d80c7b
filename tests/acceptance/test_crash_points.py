"""
Named crash points at the engine's boundaries, on each backend: a process
dies there (os._exit, like a kill) and the work is neither lost nor done twice.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from saga import Engine
from saga.core.faults import EXIT_CODE
from saga.examples.approvals import app
from saga.testing import SagaClock, run_due
from tests.helpers import engine_on, expire_lease

# A worker process started, killed at a crash point, and its lease run out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _die_at(point, url, marker):
    os.environ["SAGA_CRASH_POINTS"] = point
    os.environ["SAGA_CRASH_MARKER"] = marker
    with Engine(url, app=app) as engine:
        run_due(engine)


def crash(point, url, marker):
    """Run the due work in a process that dies at ``point``; its exit code."""
    process = multiprocessing.get_context("forkserver").Process(
        target=_die_at, args=(point, url, marker)
    )
    process.start()
    process.join(timeout=60)
    return process.exitcode


@pytest.fixture
def approvals(db_url):
    with engine_on(db_url, app) as engine:
        yield engine


def test_a_worker_killed_holding_a_due_timer_fires_it_once_after_its_lease(
    approvals, db_url, tmp_path
):
    """Killed between claiming the timer and firing it: the next worker fires it, once."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    run_due(approvals)  # the reviewer is notified; the timer waits an hour
    SagaClock(approvals.db).advance(3601)
    assert EXIT_CODE == crash("timer.before_fire", db_url, str(tmp_path / "m"))
    assert "submitted" == approvals.sagas.get(saga.id).state
    expire_lease(approvals, f"timer:{saga.id}:1")
    run_due(approvals)
    history = approvals.sagas.history(saga.id)
    assert ["start", "review_overdue"] == [row.event for row in history]
    assert "escalated" == approvals.sagas.get(saga.id).state
