"""
``saga worker``: several worker processes under one supervisor.

Each worker is a process of its own (a crash, a hang or a segfault in a
handler takes down one worker, not the service); the supervisor restarts
workers that die, forwards SIGTERM/SIGINT for a graceful stop, and sums
their counters, which each worker sends as they change (a worker that is
replaced has already told what it did).  A job that kills its worker comes back only after its lease
expires, alone, and becomes a dead letter after its last attempt.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for
from typing import TYPE_CHECKING, Any, Final

from saga.core.app_loading import load_app
from saga.core.logs import configure_logging, get_logger
from saga.core.queue.kinds import Handlers
from saga.core.workers.report import COUNTERS, WorkerReport
from saga.core.workers.worker import Worker
from saga.exceptions import SagaError

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue as MPQueue

    from saga.core.engine import Engine
    from saga.core.messages.relay import Relay

log = get_logger(__name__)

# The exit code of a worker process whose startup or loop raised.
EXIT_CRASHED: Final = 70
MAX_CONCURRENCY: Final = 64


class WorkersCrashing(SagaError):
    """Worker processes kept dying right after they started; the supervisor gave up."""

    def __init__(self, *, crashes: int, last_traceback: str | None) -> None:
        self.crashes = crashes
        self.last_traceback = last_traceback
        super().__init__(
            f"worker processes died {crashes} times in a row right after starting; "
            "giving up (the last traceback is above)"
            if last_traceback
            else f"worker processes died {crashes} times in a row right after starting; giving up"
        )
        self._kwargs = {"crashes": crashes, "last_traceback": last_traceback}


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """Everything a worker process needs, picklable."""

    url: str
    app: str | None = None
    # The values of the application's own options (its Commands' options, by dest).
    app_options: tuple[tuple[str, str | None], ...] = ()
    batch: int = 50
    lease_seconds: float = 30.0
    poll_interval: float = 1.0
    queues: tuple[str, ...] | None = None
    burst: bool = False
    log_level: str = "warning"
    broker_url: str | None = None
    exchange: str | None = None
    metrics: bool = False


def builtin_handlers(engine: Engine) -> Handlers:
    """Every job kind a worker of ``engine`` runs: timers, deadlines, the application's."""
    from saga.core.recon.lifecycle import deadline_kind  # noqa: PLC0415 - avoids an import cycle with _engine
    from saga.core.sagas.timers import timer_kind  # noqa: PLC0415

    return Handlers([timer_kind(engine), deadline_kind(), *engine.step_kinds()])


class _Progress:
    """
    A worker process's counters, sent to the supervisor as they change.

    Only what changed since the last send (a delta), after each batch and
    each timed-out attempt, and before the worker ends its own process (then
    the queue is flushed first): a process that is replaced has told what it
    did.  One killed outright loses at most the batch it was in.
    """

    def __init__(self, reports: MPQueue[dict[str, Any]]) -> None:
        self.reports = reports
        self.report: WorkerReport | None = None
        self.relay: Relay | None = None
        self.sent: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        # The heartbeat thread reports timed-out attempts.
        self._lock = threading.Lock()

    def __call__(self, exiting: bool = False) -> None:
        with self._lock:
            if self.report is not None:
                now = {name: int(getattr(self.report, name)) for name in COUNTERS}
                if self.relay is not None:
                    now["published"] = self.relay.report.published
                delta = {k: v - self.sent[k] for k, v in now.items() if v != self.sent[k]}
                if delta:
                    self.reports.put({"progress": delta})
                    self.sent = now
            if exiting:
                self.reports.close()
                self.reports.join_thread()


def run_worker_process(options: WorkerOptions, reports: MPQueue[dict[str, Any]]) -> None:
    """Entry point of one worker process."""
    from saga.core.engine import Engine  # noqa: PLC0415

    configure_logging(options.log_level)
    if options.metrics:
        from saga.core import metrics  # noqa: PLC0415 - only with --metrics-port

        metrics.enable()  # into $PROMETHEUS_MULTIPROC_DIR, which the supervisor serves
    progress = _Progress(reports)
    try:
        app = load_app(options.app)
        app = app.configured(dict(options.app_options))
        with Engine(options.url, app=app) as engine:
            # The outbox relay is one more poller: each worker process publishes
            # between claims, and SKIP LOCKED shares the events among them.
            relay = engine.relay(
                broker_url=options.broker_url,
                exchange=options.exchange,
                lease_seconds=options.lease_seconds,
            )
            pollers = [*engine.pollers(), *([relay] if relay is not None else [])]
            worker = Worker(
                engine.db,
                builtin_handlers(engine),
                pollers=pollers,
                batch=options.batch,
                lease_seconds=options.lease_seconds,
                poll_interval=options.poll_interval,
                queues=options.queues,
                exit_when_stuck=True,
                progress=progress,
            )
            progress.report, progress.relay = worker.report, relay
            signal.signal(signal.SIGTERM, lambda *_: worker.stop())
            signal.signal(signal.SIGINT, lambda *_: worker.stop())
            try:
                worker.run(burst=options.burst)
            finally:
                if relay is not None:
                    relay.close()
    except Exception:  # noqa: BLE001 - the supervisor reports it once, not each child
        reports.put({"crash": traceback.format_exc()})
        progress(exiting=True)  # what it did before it crashed counts too
        os._exit(EXIT_CRASHED)
    progress()


class Supervisor:
    """
    Run ``concurrency`` worker processes until stopped.

    In burst mode it returns once every worker found nothing due.  A worker
    that dies is restarted after ``restart_delay``, doubled for each death in
    a row that came within ``min_uptime`` of its start (a crash loop), up to
    ``max_restart_delay``; after ``give_up_after`` such deaths in a row the
    supervisor stops every worker and raises :class:`WorkersCrashing` with
    the last traceback, printed once.

    Args:
        restart_delay: first pause before restarting a worker that died, so
            a poison job cannot spin the machine.

    """

    def __init__(
        self,
        options: WorkerOptions,
        *,
        concurrency: int = 1,
        restart_delay: float = 0.5,
        max_restart_delay: float = 8.0,
        min_uptime: float = 5.0,
        give_up_after: int = 5,
    ) -> None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            msg = f"concurrency must be between 1 and {MAX_CONCURRENCY}"
            raise ValueError(msg)
        self.options = options
        self.concurrency = concurrency
        self.restart_delay = restart_delay
        self.max_restart_delay = max_restart_delay
        self.min_uptime = min_uptime
        self.give_up_after = give_up_after
        self.restarts = 0
        self._quick_deaths = 0
        self._last_traceback: str | None = None
        self._stopping = False
        self._signals = 0
        # forkserver: children start from a clean, preloaded interpreter and
        # inherit none of this process's connections.
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["saga", "saga.core.workers.supervisor"])
        self._reports: MPQueue[dict[str, Any]] = self._ctx.Queue()

    def _start(self, slot: int) -> tuple[SpawnProcess, float]:
        process = self._ctx.Process(
            target=run_worker_process,
            args=(self.options, self._reports),
            name=f"saga-worker-{slot}",
        )
        process.start()
        log.info("worker_process_started", slot=slot, pid=process.pid)
        return process, time.monotonic()  # type: ignore[return-value]

    def stop(self, *_: object) -> None:
        """Graceful stop; a second call kills the workers."""
        self._signals += 1
        self._stopping = True

    def run(self) -> WorkerReport:
        """Supervise the workers; their summed report (:class:`WorkersCrashing` on a loop)."""
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        total = WorkerReport()
        children = {slot: self._start(slot) for slot in range(self.concurrency)}
        forwarded = 0
        gave_up = False
        try:
            while children:
                if self._stopping and forwarded < self._signals:
                    forwarded = self._signals
                    sig = signal.SIGTERM if forwarded == 1 else signal.SIGKILL
                    log.info("stopping_workers", signal=sig.name, workers=len(children))
                    for child, _ in children.values():
                        if child.pid is not None and child.exitcode is None:
                            os.kill(child.pid, sig)
                wait_for([child.sentinel for child, _ in children.values()], timeout=0.2)
                self._drain(total)
                for slot, (child, started) in list(children.items()):
                    if child.exitcode is None:
                        continue
                    del children[slot]
                    if child.exitcode == 0 or self._stopping:
                        continue
                    delay = self._after_death(slot, child.exitcode, time.monotonic() - started)
                    if delay is None:
                        gave_up = True
                        self.stop()
                        continue
                    time.sleep(delay)
                    self._drain(total)
                    children[slot] = self._start(slot)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._drain(total, wait=True)
        if gave_up:
            raise WorkersCrashing(crashes=self._quick_deaths, last_traceback=self._last_traceback)
        return total

    def _after_death(self, slot: int, exitcode: int, uptime: float) -> float | None:
        """The pause before restarting a worker that died; ``None``: give up."""
        self._quick_deaths = self._quick_deaths + 1 if uptime < self.min_uptime else 0
        if self._quick_deaths >= self.give_up_after:
            log.error("workers_crash_looping", deaths=self._quick_deaths, exitcode=exitcode)
            return None
        self.restarts += 1
        delay = min(
            self.max_restart_delay, self.restart_delay * 2.0 ** max(0, self._quick_deaths - 1)
        )
        log.warning(
            "worker_process_died",
            slot=slot,
            exitcode=exitcode,
            uptime_s=round(uptime, 2),
            restarting_in_s=delay,
        )
        return delay

    def _drain(self, total: WorkerReport, *, wait: bool = False) -> None:
        while True:
            try:
                report = self._reports.get(timeout=0.5 if wait else 0)
            except queue_module.Empty:
                return
            if "crash" in report:
                self._last_traceback = str(report["crash"])
                continue
            total.add(report.get("progress", {}))
