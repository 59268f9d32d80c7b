"""
Worker processes for real: 32 claimers at once, a worker frozen past its
lease (SIGSTOP), a job that kills its worker, graceful stop, and wake-up by
LISTEN/NOTIFY.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from saga import Engine
from saga.core.queue.leases import Queue
from saga.queue import NewJob
from tests import schemas
from tests.helpers import expire_lease, rows, scalar, wait_until
from tests.parallel import race

ROOT = Path(__file__).resolve().parents[2]


def claim(url, *, prepare=False, prepared=None):
    """One claim attempt in a child process: the jobs it got (id, attempt)."""
    if prepare:
        return None
    with Engine(url) as engine:
        jobs = Queue(engine.db).claim(["test.noop"], batch=1, lease_seconds=30)
        return [(job.id, job.attempt, job.token) for job in jobs]


@pytest.mark.slow
def test_32_processes_claiming_one_job_give_it_one_owner(engine, db_url):
    """Exactly one claimer gets the job, with one attempt counted."""
    Queue(engine.db).enqueue(NewJob(id="only", queue="test", kind="test.noop"))
    outcomes = race(claim, [(db_url,)] * 32)
    owners = [jobs for jobs in outcomes if jobs]
    assert 1 == len(owners)
    assert ("only", 1) == owners[0][0][:2]
    assert [{"state": "running", "attempts": 1, "lease_token": owners[0][0][2]}] == rows(
        engine, "SELECT state, attempts, lease_token FROM jobs"
    )


def worker(url, *extra, burst=False):
    command = [
        sys.executable,
        "-m",
        "saga",
        "worker",
        "--db",
        url,
        "--app",
        "tests.queue_app:app",
        "--log-level",
        "info",
        "--poll-interval",
        "0.2",
        *extra,
    ]
    if burst:
        command.append("--burst")
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for_log(process, event):
    """Read the worker's log until ``event`` appears (its lines before are consumed)."""
    for line in iter(process.stderr.readline, ""):
        if event in line:
            return
    raise AssertionError(f"the worker exited without logging {event}")


def stop(process):
    """SIGTERM, and the exit code and output; a worker that does not stop is killed."""
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        return "did not stop on SIGTERM", out, err
    return process.returncode, out, err


@pytest.mark.slow
def test_frozen_worker_cannot_complete_after_losing_its_lease(engine, db_url, tmp_path):
    """SIGSTOP past the lease: another worker takes over and completes; the old one is refused."""
    Queue(engine.db).enqueue(
        NewJob(id="frozen", queue="test", kind="test.wait", payload={"folder": str(tmp_path)})
    )
    first = worker(db_url, "--lease-seconds", "30")  # no heartbeat during the test
    try:
        marker = wait_until(lambda: next(tmp_path.glob("started.*.1"), None))
        frozen_pid = int(marker.name.split(".")[1])
        os.kill(frozen_pid, signal.SIGSTOP)
        expire_lease(engine, "frozen")  # the database clock passes the frozen worker's lease
        (tmp_path / "go").touch()
        second = worker(db_url, "--lease-seconds", "5", burst=True)
        _, second_err = second.communicate(timeout=60)
        assert 0 == second.returncode, second_err
        taker = next(tmp_path.glob("started.*.2"))
        taker_pid = int(taker.name.split(".")[1])
        assert taker_pid != frozen_pid
        assert "done" == Queue(engine.db).get("frozen").state
        # The old worker resumes and is asked to stop: its handler returns first,
        # and its completion is fenced.
        os.kill(frozen_pid, signal.SIGCONT)
    finally:
        code, _, err = stop(first)
    assert 0 == code, err
    assert "lease_lost" in err
    assert {"pid": taker_pid} == Queue(engine.db).result("frozen")
    assert 1 == scalar(engine, "SELECT count(*) FROM job_results")


@pytest.mark.slow
def test_poison_job_is_dead_lettered_while_other_jobs_flow(engine, db_url):
    """A job that kills its worker every time: attempts capped, dead-lettered, the rest done."""
    queue = Queue(engine.db)
    queue.enqueue(NewJob(id="poison", queue="test", kind="test.poison", max_attempts=3))
    for n in range(20):
        queue.enqueue(NewJob(id=f"ok-{n}", queue="test", kind="test.noop"))
    process = worker(db_url, "--concurrency", "2", "--lease-seconds", "1", "--batch", "5")
    try:
        wait_until(
            lambda: (
                scalar(engine, "SELECT count(*) FROM job_archive") == 20
                and queue.get("poison").state == "failed"
            ),
            timeout=90,
        )
    finally:
        code, _, err = stop(process)
    assert 0 == code, err
    poison = queue.get("poison")
    assert ("failed", "crashed", 3) == (poison.state, poison.error_class, poison.attempts)
    assert "worker_process_died" in err


@pytest.mark.slow
def test_sigterm_lets_the_running_job_finish(engine, db_url, tmp_path):
    """SIGTERM: the job in hand completes, then the workers exit 0."""
    Queue(engine.db).enqueue(
        NewJob(id="slow", queue="test", kind="test.wait", payload={"folder": str(tmp_path)})
    )
    process = worker(db_url)
    wait_until(lambda: next(tmp_path.glob("started.*"), None))
    process.send_signal(signal.SIGTERM)
    wait_for_log(process, "stopping_workers")
    (tmp_path / "go").touch()  # only once the worker was told to stop
    out, err = process.communicate(timeout=60)
    assert 0 == process.returncode, err
    assert "done" == Queue(engine.db).get("slow").state
    assert "1 done" in out


LISTENING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = :name
  AND query = 'LISTEN "saga_jobs"'
"""


@pytest.mark.slow
def test_postgres_workers_wake_on_notify(postgres_url):
    """With a 60 s poll interval, a new job is still picked up at once: LISTEN/NOTIFY."""
    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    command = [
        sys.executable,
        "-m",
        "saga",
        "worker",
        "--db",
        postgres_url,
        "--app",
        "tests.queue_app:app",
        "--poll-interval",
        "60",
    ]
    # Named for this test: other workers on the server listen on the same channel.
    name = f"saga-test-{uuid.uuid4().hex[:12]}"
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SAGA_APPLICATION_NAME": name},
    )
    try:
        with Engine(postgres_url) as pg:
            wait_until(lambda: scalar(pg, LISTENING, name=f"{name}:listen"))
            Queue(pg.db).enqueue(NewJob(id="wake", queue="test", kind="test.noop"))
            wait_until(lambda: Queue(pg.db).get("wake").state == "done", timeout=20)
    finally:
        code, _, err = stop(process)
    assert 0 == code, err
