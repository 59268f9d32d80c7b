"""Applications whose worker processes die: as they start (crash loop), or stuck in a job."""

from __future__ import annotations

import dataclasses
import os
import threading

from saga.core.queue.backoff import Backoff
from saga.core.queue.kinds import Handlers, JobKind
from saga.purchase.app import purchase_app


def _with_jobs(extra):
    """The purchase application, with job kinds of its own added."""
    base = purchase_app()
    return dataclasses.replace(base, jobs=lambda engine: [*base.jobs(engine), *extra(engine)])


def handlers(engine):
    """Fine in the supervisor's own process; raises in every worker process it starts."""
    if str(os.getpid()) != os.environ.get("SAGA_TEST_SUPERVISOR_PID"):
        msg = "boom: this worker cannot start"
        raise RuntimeError(msg)
    return Handlers([JobKind("test.never", lambda job: None, queue="test")])


HANG_SECONDS = 0.5


def hanging(engine):
    """
    A job kind whose handler ignores its timeout: each attempt times out, then its process is stuck.

    The worker settles the attempt as timed out (retried, then dead-lettered
    at the second) and ends its own stuck process; the supervisor replaces it.
    """
    del engine
    return Handlers(
        [
            JobKind(
                "test.hang",
                _hang,
                queue="test",
                max_attempts=2,
                timeout_seconds=HANG_SECONDS,
                backoff=Backoff(base=0.001, cap=0.001),
            )
        ]
    )


def _hang(job):
    del job
    threading.Event().wait()  # forever: only the end of the process ends it


def crash_looping():
    """``--app tests.crashing_app:crash_looping``: its worker processes die as they start."""
    return _with_jobs(handlers)


def hanging_app():
    """``--app tests.crashing_app:hanging_app``: a worker process stuck in a job."""
    return _with_jobs(hanging)
