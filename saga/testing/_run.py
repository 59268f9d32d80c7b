"""Due work, run inline: what ``saga worker --burst`` would do, in this process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker

if TYPE_CHECKING:
    from saga.core.engine import Engine
    from saga.core.workers.report import WorkerReport


def run_due(engine: Engine) -> WorkerReport:
    """Run every job due now (timers, steps, the application's jobs) until none is."""
    worker = Worker(engine.db, builtin_handlers(engine), listen=False, poll_interval=0.01)
    return worker.run(burst=True)
