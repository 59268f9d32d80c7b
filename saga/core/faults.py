"""
Named crash points for fault-injection tests and the chaos harness.

``SAGA_CRASH_POINTS=worker.before_complete`` makes a process die
(``os._exit``, no cleanup, like a kill) when it reaches that point, so a test
can prove recovery from the worst moment: after a step acted and before the
engine recorded it.  ``*`` names every point.

Two modes:

- once (the default): the point fires the first time it is reached, and
  never again for the same ``SAGA_CRASH_MARKER`` (a file per point records
  that it fired), so the restarted process gets past it;
- at a rate (``SAGA_CRASH_RATE=0.02``): each time a point is reached it
  fires with that probability, drawn from ``SAGA_CRASH_SEED`` so that a
  process's sequence of decisions is reproducible (``saga chaos``).

With ``SAGA_CRASH_REPORT`` naming a directory, the dying process leaves a
file there naming the point, so a harness can count crashes by point.
Unset, a crash point costs one dictionary lookup.

The same points can pause instead of kill: ``SAGA_PAUSE_POINTS`` (with
``SAGA_PAUSE_RATE``, or a rate per point as ``refund.after_call@0.3``, and
``SAGA_PAUSE_SECONDS``) stops the whole process
there (SIGSTOP, its heartbeat included) for that long, then lets it go on,
so that it wakes up past its leases at the worst moment and tries to finish
what it was doing: the fencing must refuse it.  The report file then says
``pause:<point>``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

_ENV: Final = "SAGA_CRASH_POINTS"
EXIT_CODE: Final = 137

# Every point the engine declares, by boundary (an application's steps declare
# their own beside these: `crash_point("<step>.after_call")`).
CRASH_POINTS: Final = (
    "accept.after_commit",  # the acceptance committed, the caller not yet answered
    "timer.before_fire",  # a timer batch claimed, this timer not yet fired
    "worker.before_complete",  # a batch of results computed, not yet completed
    "checker.after_answer",  # the outside world answered the checker, no decision yet
    "relay.before_publish",  # an outbox batch claimed, nothing published
    "relay.after_publish",  # published and confirmed, not yet marked
    "consumer.before_ack",  # a message handled and committed, not yet acknowledged
    "migrate.between_batches",  # a migration's batch committed, the next not begun
)

_rng: random.Random | None = None
# How a crash point ends the process; an in-process test may swap it for an exception.
_die: Callable[[int], NoReturn] = os._exit


def crash_point(name: str) -> None:
    """Die (or pause) here if the process was told to (see the module's docstring)."""
    _pause_point(name)
    wanted = os.environ.get(_ENV)
    if not wanted:
        return
    points = wanted.split(",")
    if name not in points and "*" not in points:
        return
    rate = os.environ.get("SAGA_CRASH_RATE")
    if rate is not None:
        if _draw() >= float(rate):
            return
    else:
        marker = os.environ.get("SAGA_CRASH_MARKER")
        if marker:
            path = Path(f"{marker}.{name}")
            if path.exists():
                return
            path.write_text(str(os.getpid()))
    report = os.environ.get("SAGA_CRASH_REPORT")
    if report:
        Path(report, f"{os.getpid()}.{name}").write_text(name)
    _die(EXIT_CODE)


def _pause_point(name: str) -> None:
    wanted = os.environ.get("SAGA_PAUSE_POINTS")
    if not wanted:
        return
    # "point" pauses at SAGA_PAUSE_RATE, "point@0.3" at a rate of its own.
    rates = dict(f"{entry}@".split("@")[:2] for entry in wanted.split(","))
    if name not in rates:
        return
    if _draw() >= float(rates[name] or os.environ.get("SAGA_PAUSE_RATE", "0")):
        return
    report = os.environ.get("SAGA_CRASH_REPORT")
    if report:
        Path(report, f"{os.getpid()}.{time.monotonic_ns()}.pause").write_text(f"pause:{name}")
    seconds = float(os.environ.get("SAGA_PAUSE_SECONDS", "5"))
    me = os.getpid()
    # Another process wakes this one up: nothing of a stopped process runs, its
    # timers included.  Not a fork of this one: a copy of a threaded process
    # can deadlock before it wakes anyone, and keeps this one's files open.
    waker = subprocess.Popen(  # noqa: S603 - a fixed program, numbers only
        ["/bin/sh", "-c", f"sleep {seconds:.3f}; kill -CONT {me:d}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
    )
    os.kill(me, signal.SIGSTOP)
    waker.wait()


def _draw() -> float:
    global _rng  # noqa: PLW0603 - one generator per process, seeded once
    if _rng is None:
        _rng = random.Random(os.environ.get("SAGA_CRASH_SEED", "0"))
    return _rng.random()
