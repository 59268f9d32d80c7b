"""Job kinds for the worker tests, loaded by `saga worker --app tests.queue_app:app`."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

from saga.core.queue.kinds import Handlers, JobKind
from saga.purchase.app import purchase_app


def app():
    """The purchase application, with the worker tests' job kinds added."""
    base = purchase_app()
    return dataclasses.replace(base, jobs=lambda engine: [*base.jobs(engine), *handlers(engine)])


def handlers(engine):
    return Handlers(
        [
            JobKind("test.noop", _noop, queue="test"),
            JobKind("test.wait", _wait_for_go, queue="test"),
            JobKind("test.poison", _poison, queue="test"),
        ]
    )


def _noop(job):
    return {"pid": os.getpid()}


def _wait_for_go(job):
    """Say which process started the job, then wait until the test says go."""
    folder = Path(job.payload["folder"])
    (folder / f"started.{os.getpid()}.{job.attempt}").write_text(job.id)
    while not (folder / "go").exists():
        time.sleep(0.05)
    return {"pid": os.getpid()}


def _poison(job):
    """Kill the worker process running it, every time."""
    os.kill(os.getpid(), signal.SIGKILL)
