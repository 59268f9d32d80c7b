"""
``saga worker``: several worker processes under one supervisor.

Each worker is a process of its own (a crash, a hang or a segfault in a
handler takes down one worker, not the service); the supervisor restarts
workers that die, forwards SIGTERM/SIGINT for a graceful stop, and sums
their reports.  A job that kills its worker comes back only after its lease
expires, alone, and becomes a dead letter after its last attempt.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for
from typing import TYPE_CHECKING, Any

import structlog

from saga._handlers import Handlers, HandlersFactory, load_factory
from saga._worker import Worker, WorkerReport

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue as MPQueue

    from saga._engine import Engine

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """Everything a worker process needs, picklable."""

    url: str
    sandbox_url: str | None = None
    app: str | None = None
    batch: int = 50
    lease_seconds: float = 30.0
    poll_interval: float = 1.0
    queues: tuple[str, ...] | None = None
    burst: bool = False
    log_level: str = "warning"


def builtin_handlers(engine: Engine) -> Handlers:
    """The engine's own job kinds: timers, and the steps of the registered sagas."""
    from saga._timers import timer_kind  # noqa: PLC0415 - avoids an import cycle with _engine

    return Handlers([timer_kind(engine), *engine.step_kinds()])


def build_handlers(engine: Engine, app: str | None) -> Handlers:
    """Built-in job kinds, plus those of ``app`` (``MODULE:NAME``) if given."""
    handlers = builtin_handlers(engine)
    if app is not None:
        factory: HandlersFactory = load_factory(app)
        handlers = handlers.merged(factory(engine))
    return handlers


def run_worker_process(options: WorkerOptions, reports: MPQueue[dict[str, Any]]) -> None:
    """Entry point of one worker process."""
    from saga._cli._common import configure_logging  # noqa: PLC0415 - child-only setup
    from saga._engine import Engine  # noqa: PLC0415

    configure_logging(options.log_level)
    with Engine(options.url, sandbox_url=options.sandbox_url) as engine:
        worker = Worker(
            engine.db,
            build_handlers(engine, options.app),
            pollers=engine.pollers(),
            batch=options.batch,
            lease_seconds=options.lease_seconds,
            poll_interval=options.poll_interval,
            queues=options.queues,
        )
        signal.signal(signal.SIGTERM, lambda *_: worker.stop())
        signal.signal(signal.SIGINT, lambda *_: worker.stop())
        report = worker.run(burst=options.burst)
    reports.put(report.as_dict())


class Supervisor:
    """
    Run ``concurrency`` worker processes until stopped.

    In burst mode it returns once every worker found nothing due.

    Args:
        restart_delay: pause before restarting a worker that died, so a
            poison job cannot spin the machine.

    """

    def __init__(
        self, options: WorkerOptions, *, concurrency: int = 1, restart_delay: float = 0.5
    ) -> None:
        if concurrency < 1:
            msg = "concurrency must be at least 1"
            raise ValueError(msg)
        self.options = options
        self.concurrency = concurrency
        self.restart_delay = restart_delay
        self.restarts = 0
        self._stopping = False
        self._signals = 0
        # forkserver: children start from a clean, preloaded interpreter and
        # inherit none of this process's connections.
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["saga", "saga._supervisor"])
        self._reports: MPQueue[dict[str, Any]] = self._ctx.Queue()

    def _start(self, slot: int) -> SpawnProcess:
        process = self._ctx.Process(
            target=run_worker_process,
            args=(self.options, self._reports),
            name=f"saga-worker-{slot}",
        )
        process.start()
        log.info("worker_process_started", slot=slot, pid=process.pid)
        return process  # type: ignore[return-value]

    def stop(self, *_: object) -> None:
        """Graceful stop; a second call kills the workers."""
        self._signals += 1
        self._stopping = True

    def run(self) -> WorkerReport:
        """Supervise the workers; their summed report."""
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        total = WorkerReport()
        children = {slot: self._start(slot) for slot in range(self.concurrency)}
        forwarded = 0
        try:
            while children:
                if self._stopping and forwarded < self._signals:
                    forwarded = self._signals
                    sig = signal.SIGTERM if forwarded == 1 else signal.SIGKILL
                    log.info("stopping_workers", signal=sig.name, workers=len(children))
                    for child in children.values():
                        if child.pid is not None and child.exitcode is None:
                            os.kill(child.pid, sig)
                wait_for([child.sentinel for child in children.values()], timeout=0.2)
                self._drain(total)
                for slot, child in list(children.items()):
                    if child.exitcode is None:
                        continue
                    del children[slot]
                    if child.exitcode != 0 and not self._stopping:
                        self.restarts += 1
                        log.warning(
                            "worker_process_died",
                            slot=slot,
                            exitcode=child.exitcode,
                            restarting_in_s=self.restart_delay,
                        )
                        time.sleep(self.restart_delay)
                        children[slot] = self._start(slot)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._drain(total, wait=True)
        return total

    def _drain(self, total: WorkerReport, *, wait: bool = False) -> None:
        while True:
            try:
                report = self._reports.get(timeout=0.5 if wait else 0)
            except queue_module.Empty:
                return
            total.add(report)
