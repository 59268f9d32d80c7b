"""
``saga worker --burst``'s summary counts the work of every process, replaced ones too.

A job whose handler ignores its timeout: each attempt is settled as timed
out by the heartbeat, then its process, stuck, ends itself and the
supervisor starts another.  The processes send their counters as they
change, so the summary has the attempts of the processes that died.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga.core.queue.kinds import Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.queue import NewJob
from tests.helpers import expire_lease, rows

ROOT = Path(__file__).resolve().parents[2]


def burst(engine, *, concurrency: int) -> dict:
    url = engine.db.url.render_as_string(hide_password=False)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "saga", "worker", "--burst", "--json", "--db", url),
            *(
                "--sandbox-db",
                engine.services.sandbox_url,
                "--app",
                "tests.crashing_app:hanging_app",
            ),
            *("--concurrency", str(concurrency), "--lease-seconds", "1.5"),
            *("--log-level", "error"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 2])
def test_the_summary_adds_the_counters_of_replaced_workers(engine, concurrency):
    Queue(engine.db).enqueue(NewJob(id="hang-1", queue="test", kind="test.hang", max_attempts=2))
    summary = burst(engine, concurrency=concurrency)
    (job,) = rows(engine, "SELECT state, attempts, error_class FROM jobs WHERE id = 'hang-1'")
    assert ("failed", 2, "timed_out") == (job["state"], job["attempts"], job["error_class"])
    counted = {k: summary[k] for k in ("timed_out", "retried", "dead_lettered", "restarts")}
    # Two attempts, each timed out in a process that then ended stuck and was replaced.
    assert {"timed_out": 2, "retried": 1, "dead_lettered": 1, "restarts": 2} == counted
    assert 2 == summary["claimed"]


def test_a_job_dead_lettered_by_a_claim_is_counted_by_the_worker_that_claimed(engine):
    """Its last attempt's lease ran out (its process died): the next claim's dead letter counts."""
    queue = Queue(engine.db)
    queue.enqueue(NewJob(id="gone-1", queue="test", kind="test.noop", max_attempts=1))
    (job,) = queue.claim(["test.noop"], batch=1)
    expire_lease(engine, job.id)
    worker = Worker(
        engine.db, Handlers([JobKind("test.noop", lambda job: None, queue="test")]), listen=False
    )
    report = worker.run(burst=True)
    assert ("failed", "crashed") == (queue.get(job.id).state, queue.get(job.id).error_class)
    assert (1, 0) == (report.dead_lettered, report.done)
