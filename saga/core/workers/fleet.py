"""
Worker processes a fault harness can kill, pause and restart.

:class:`WorkerFleet` runs real worker processes (the ones ``saga worker``
runs), each with its own crash-point schedule: a seed per process and
generation, so that the same harness seed replays the same decisions in
each process.  The harness kills them (SIGKILL), pauses them past their
lease (SIGSTOP, then SIGCONT: a stale worker that wakes up believing it
still holds its jobs), and restarts the ones that died, counting how each
death came about.  Nothing here is for production: ``saga worker``'s
supervisor is.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from saga.core.faults import CRASH_POINTS, EXIT_CODE
from saga.core.workers.supervisor import WorkerOptions, run_worker_process

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue as MPQueue

APPLICATION_NAME_ENV: Final = "SAGA_APPLICATION_NAME"


def _run(
    env: dict[str, str],
    options: WorkerOptions,
    reports: MPQueue[dict[str, Any]],
    setup: Callable[[], object] | None,
) -> None:
    # The crash points are armed in this process only, never in the harness.
    os.environ.update(env)
    if setup is not None:
        setup()  # before the engine exists: what it changes, the worker's engine sees
    run_worker_process(options, reports)


@dataclass(slots=True)
class _Slot:
    process: SpawnProcess
    generation: int
    paused: bool = False


@dataclass(slots=True)
class FleetReport:
    """How the fleet's processes died and how often they were restarted."""

    killed: int = 0
    paused: int = 0
    restarted: int = 0
    crash_points: Counter[str] = field(default_factory=Counter)
    # Workers that paused themselves past their lease at a point, by point.
    paused_at: Counter[str] = field(default_factory=Counter)
    other_exits: Counter[int] = field(default_factory=Counter)
    # What the processes that crashed (exit 70) raised: each traceback's last line.
    crashes: Counter[str] = field(default_factory=Counter)


class WorkerFleet:
    """
    ``size`` worker processes with crash points armed at ``crash_rate``.

    Args:
        options: what each worker runs (the database, the broker, its lease).
        seed: the fleet's seed; process ``slot`` in its ``generation``-th life
            draws its crash decisions from ``seed:slot:generation``.
        crash_rate: the chance that a process dies at a crash point it reaches.
        application_name: the processes' name in ``pg_stat_activity``, so
            that a harness can end their sessions and no one else's.
        setup: run in each process before its worker starts (picklable: a
            module-level function or a ``functools.partial`` of one).
        pause: (rate, points, seconds): the chance that a process stops
            itself at a point it reaches, and for how long.

    """

    def __init__(
        self,
        options: WorkerOptions,
        *,
        size: int,
        seed: int,
        crash_rate: float = 0.0,
        crash_points: tuple[str, ...] = CRASH_POINTS,
        application_name: str = "saga-worker",
        extra_env: dict[str, str] | None = None,
        setup: Callable[[], object] | None = None,
        pause: tuple[float, tuple[str, ...], float] | None = None,
    ) -> None:
        if size < 1:
            msg = "a fleet needs at least one worker"
            raise ValueError(msg)
        self.options = options
        self.size = size
        self.seed = seed
        self.crash_rate = crash_rate
        self.crash_points = crash_points
        self.application_name = application_name
        self.extra_env = dict(extra_env or {})
        self.setup = setup
        self.pause_at = pause
        self.report = FleetReport()
        self._dir = tempfile.TemporaryDirectory(prefix="saga-fleet-")
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["saga", "saga.core.workers.supervisor"])
        self._reports: MPQueue[dict[str, Any]] = self._ctx.Queue()
        self._slots: dict[int, _Slot] = {}
        self._counted: set[str] = set()
        # A harness may resume paused workers from a timer thread.
        self._lock = threading.RLock()

    def _env(self, slot: int, generation: int) -> dict[str, str]:
        env = {APPLICATION_NAME_ENV: self.application_name, **self.extra_env}
        if self.crash_rate > 0 or self.pause_at is not None:
            env |= {
                "SAGA_CRASH_SEED": f"{self.seed}:{slot}:{generation}",
                "SAGA_CRASH_REPORT": self._dir.name,
            }
        if self.crash_rate > 0:
            env |= {
                "SAGA_CRASH_POINTS": ",".join(self.crash_points),
                "SAGA_CRASH_RATE": repr(self.crash_rate),
            }
        if self.pause_at is not None:
            rate, points, seconds = self.pause_at
            env |= {
                "SAGA_PAUSE_POINTS": ",".join(points),
                "SAGA_PAUSE_RATE": repr(rate),
                "SAGA_PAUSE_SECONDS": repr(seconds),
            }
        return env

    def _spawn(self, slot: int, generation: int) -> None:
        process = self._ctx.Process(
            target=_run,
            args=(self._env(slot, generation), self.options, self._reports, self.setup),
            name=f"saga-chaos-worker-{slot}",
        )
        process.start()
        self._slots[slot] = _Slot(process, generation)  # type: ignore[arg-type]

    def start(self) -> None:
        """Start every worker."""
        for slot in range(self.size):
            self._spawn(slot, 0)

    @property
    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return [s.process.pid for s in self._slots.values() if s.process.pid is not None]

    def kill(self, slot: int) -> bool:
        """SIGKILL worker ``slot`` (no cleanup, like the OOM killer); false if it was down."""
        with self._lock:
            found = self._slots.get(slot % self.size)
            if found is None or found.process.exitcode is not None or found.process.pid is None:
                return False
            if found.paused:
                os.kill(found.process.pid, signal.SIGCONT)
            os.kill(found.process.pid, signal.SIGKILL)
            found.process.join(timeout=10)
            self.report.killed += 1
            return True

    def pause(self, slot: int, *, seconds: float) -> bool:
        """
        SIGSTOP worker ``slot`` for ``seconds``: it holds its jobs while its leases run out.

        It resumes on its own (a timer thread), like a process coming back
        from a long GC pause or a frozen VM, whatever the harness is doing.
        """
        with self._lock:
            found = self._slots.get(slot % self.size)
            if found is None or found.paused or found.process.exitcode is not None:
                return False
            if found.process.pid is None:
                return False
            os.kill(found.process.pid, signal.SIGSTOP)
            found.paused = True
            self.report.paused += 1
        timer = threading.Timer(seconds, self._resume, args=(found,))
        timer.daemon = True
        timer.start()
        return True

    def _resume(self, found: _Slot) -> None:
        with self._lock:
            if found.paused and found.process.exitcode is None and found.process.pid is not None:
                os.kill(found.process.pid, signal.SIGCONT)
            found.paused = False

    def resume_all(self) -> None:
        """SIGCONT every paused worker: each wakes up with expired leases."""
        with self._lock:
            for found in self._slots.values():
                if (
                    found.paused
                    and found.process.exitcode is None
                    and found.process.pid is not None
                ):
                    os.kill(found.process.pid, signal.SIGCONT)
                found.paused = False

    def restart_dead(self) -> int:
        """Restart the workers that died (counting how); how many were restarted."""
        with self._lock:
            self._drain()
            restarted = 0
            for slot, found in list(self._slots.items()):
                code = found.process.exitcode
                if code is None:
                    continue
                if code not in (EXIT_CODE, -signal.SIGKILL):
                    self.report.other_exits[code] += 1
                self._spawn(slot, found.generation + 1)
                restarted += 1
            self.report.restarted += restarted
            self._count_crash_points()
            return restarted

    def _count_crash_points(self) -> None:
        for path in Path(self._dir.name).iterdir():
            if path.name not in self._counted:
                self._counted.add(path.name)
                point = path.read_text()
                if point.startswith("pause:"):
                    self.report.paused_at[point.removeprefix("pause:")] += 1
                else:
                    self.report.crash_points[point] += 1

    def _drain(self) -> None:
        while True:
            try:
                sent = self._reports.get_nowait()
            except queue_module.Empty:
                return
            if sent.get("crash"):
                self.report.crashes[_raised(str(sent["crash"]))] += 1

    def stop(self, *, timeout: float = 60.0) -> None:
        """SIGTERM every worker (a graceful stop), SIGKILL those still running after ``timeout``."""
        with self._lock:
            self.resume_all()
            for found in self._slots.values():
                if found.process.exitcode is None and found.process.pid is not None:
                    os.kill(found.process.pid, signal.SIGTERM)
            for found in self._slots.values():
                found.process.join(timeout=timeout)
                if found.process.exitcode is None:
                    found.process.kill()
                    found.process.join()
            self._drain()
            self._count_crash_points()
            self._slots.clear()

    def close(self) -> None:
        """Stop the workers and remove the crash reports."""
        self.stop()
        self._dir.cleanup()


def _raised(trace: str) -> str:
    """The exception a traceback ends with: its last line that is not indented."""
    lines = [line for line in trace.splitlines() if line.strip() and not line[0].isspace()]
    return lines[-1] if lines else trace.strip()
