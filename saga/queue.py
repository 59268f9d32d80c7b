"""
The job queue and its workers.

Accepting jobs, fenced completion, retries and dead letters, and the workers
(one in this process, or a fleet) that run the steps, timers and pollers.
docs/queue.md explains them; docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.queue.backoff import Backoff
from saga.core.queue.dead_letters import DeadLetters
from saga.core.queue.dead_letters import Filter as DeadLetterFilter
from saga.core.queue.fencing import fenced
from saga.core.queue.jobs import NewJob, enqueue_in
from saga.core.queue.kinds import Handlers, classify_error, error_text
from saga.core.queue.leases import Queue
from saga.core.workers.fleet import FleetReport, WorkerFleet
from saga.core.workers.pollers import Poller
from saga.core.workers.supervisor import WorkerOptions
from saga.core.workers.worker import Worker

__all__ = [
    "Backoff",
    "DeadLetterFilter",
    "DeadLetters",
    "FleetReport",
    "Handlers",
    "NewJob",
    "Poller",
    "Queue",
    "Worker",
    "WorkerFleet",
    "WorkerOptions",
    "classify_error",
    "enqueue_in",
    "error_text",
    "fenced",
]
