"""An application whose worker processes die as they start (for the crash-loop test)."""

from __future__ import annotations

import os

from saga.core.handlers import Handlers, JobKind


def handlers(engine):
    """Fine in the supervisor's own process; raises in every worker process it starts."""
    if str(os.getpid()) != os.environ.get("SAGA_TEST_SUPERVISOR_PID"):
        msg = "boom: this worker cannot start"
        raise RuntimeError(msg)
    return Handlers([JobKind("test.never", lambda job: None, queue="test")])
