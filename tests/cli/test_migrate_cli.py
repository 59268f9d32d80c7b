"""`saga migrate plan|apply` and the refusal of a retired version, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga.cli import main
from saga.core.faults import EXIT_CODE
from tests.helpers import engine_on, scalar
from tests.versions_app import app

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


# The apply every test here runs: leave v1 -> v2, by ann.
APPLY = ("migrate", "apply", "leave", "--to", "2", "--actor", "ann", "--reason", "v2 is out")


@pytest.fixture
def url(db_url):
    """Five v1 requests, two of them approved."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        ids = [
            engine.sagas.start("leave", operation_id=f"op-{i}", request={}).saga.id
            for i in range(5)
        ]
        for saga_id in ids[:2]:
            engine.sagas.fire(saga_id, "approve", actor="ann")
    return db_url


def saga(capsys, url, *argv, app_name="leave"):
    capsys.readouterr()
    code = main([*argv, "--db", url, "--app", f"tests.versions_app:{app_name}"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_prints_each_live_state_with_its_target_count_and_work(capsys, url):
    code, out, _ = saga(capsys, url, "migrate", "plan", "leave", "--to", "2")
    assert 0 == code
    lines = out.splitlines()
    assert "leave: 5 live saga(s) on older versions, to v2" == lines[0]
    assert lines[1].split() == ["FROM", "STATE", "SAGAS", "TO", "TIMER", "ACTIONS", "HOOK"]
    assert "v1    approved   2      approved   -" in lines[2]
    assert "notify_hr (new), book (if pending)" in lines[2]
    assert "escalate after 1800s since entered" in lines[3]


def test_plan_as_json(capsys, url):
    code, out, _ = saga(capsys, url, "migrate", "plan", "leave", "--to", "2", "--json")
    shown = json.loads(out)
    assert (0, True, 5) == (code, shown["ok"], shown["sagas"])
    assert [("approved", 2), ("requested", 3)] == [
        (s["state"], s["sagas"]) for s in shown["states"]
    ]


def test_a_plan_leaving_a_live_state_unmapped_is_refused_with_exit_2(capsys, url):
    code, out, err = saga(
        capsys, url, "migrate", "plan", "leave", "--to", "2", app_name="leave_unmapped"
    )
    assert 2 == code
    assert "v1    approved   2      (unmapped)" in out
    assert err.startswith("saga: error: plan: refused, 1 problem(s):\n")
    assert (
        "live state 'approved' of v1 is mapped nowhere: map it to a state of v2 "
        "(2 live saga(s) there)"
    ) in err


def test_an_unknown_target_is_refused_with_exit_2(capsys, url):
    code, _, err = saga(capsys, url, "migrate", "plan", "leave", "--to", "7")
    assert 2 == code
    assert "unknown target: the application registers 'leave' v1, v2, not v7" in err


def test_apply_moves_them_and_says_so_as_json(capsys, url):
    code, out, _ = saga(
        capsys,
        url,
        *APPLY,
        "--batch",
        "2",
        "--json",
    )
    summary = json.loads(out)
    assert (0, 5, 0, 3) == (code, summary["moved"], summary["skipped"], summary["batches"])
    # No worker ran: each request's notify_manager was still pending (queued again under
    # v2), each approval's book too, and notify_hr is new: 3 + 2 * 2 actions.
    assert {"timers": 3, "actions": 7} == summary["re_derived"]
    assert summary["seconds"] >= 0
    code, out, _ = saga(capsys, url, "verify", "--json")
    assert (0, True) == (code, json.loads(out)["ok"])


def test_a_dry_run_moves_nothing(capsys, url):
    code, out, _ = saga(
        capsys,
        url,
        *APPLY,
        "--dry-run",
    )
    assert (0, "would move 5 saga(s) of leave to v2 in 1 batch(es)") == (code, out.strip())


def test_an_unmapped_plan_refuses_apply_and_moves_nothing(capsys, url):
    code, _, err = saga(
        capsys,
        url,
        *APPLY,
        app_name="leave_unmapped",
    )
    assert 2 == code
    assert "mapped nowhere" in err
    with engine_on(url, app()) as engine:
        assert 0 == scalar(engine, "SELECT count(*) FROM sagas WHERE definition_version = 2")


def test_an_application_without_v1_is_refused_while_v1_sagas_live(capsys, url):
    code, _, err = saga(capsys, url, "instances", "list", app_name="leave_v2_only")
    assert 1 == code
    assert "saga 'leave' version 1 still has 5 live saga(s) (approved: 2, requested: 3)" in err


def test_a_killed_apply_resumes_where_it_stopped(tmp_path, url):
    """A real process killed at a batch boundary; the second run moves the rest, once each."""
    env = {
        **os.environ,
        "SAGA_CRASH_POINTS": "migrate.between_batches",
        "SAGA_CRASH_MARKER": str(tmp_path / "marker"),
    }
    command = [
        sys.executable,
        "-m",
        "saga",
        *APPLY,
        "--batch",
        "2",
        "--json",
        "--db",
        url,
        "--app",
        "tests.versions_app:leave",
    ]
    first = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert EXIT_CODE == first.returncode, first.stderr
    second = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert 0 == second.returncode, second.stderr
    assert (3, 2) == (json.loads(second.stdout)["moved"], json.loads(second.stdout)["batches"])
    with engine_on(url, app()) as engine:
        moved = scalar(
            engine, "SELECT count(*) FROM saga_transitions WHERE event = 'saga.migrated'"
        )
        assert 5 == moved
