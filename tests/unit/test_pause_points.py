"""A crash point that pauses: the process stops there, past its lease, then carries on."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import time
from saga.core.faults import crash_point
started = time.monotonic()
crash_point("worker.before_complete")
print(round(time.monotonic() - started, 1))
"""


def test_a_pause_point_stops_the_whole_process_and_lets_it_go_on(tmp_path):
    """It goes on by itself after the pause (a stopped process's own timers cannot wake it)."""
    env = {
        **os.environ,
        "SAGA_PAUSE_POINTS": "worker.before_complete",
        "SAGA_PAUSE_RATE": "1",
        "SAGA_PAUSE_SECONDS": "0.5",
        "SAGA_CRASH_REPORT": str(tmp_path),
    }
    env.pop("SAGA_CRASH_POINTS", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert 0 == done.returncode, done.stderr
    assert float(done.stdout) >= 0.5
    assert ["pause:worker.before_complete"] == [p.read_text() for p in tmp_path.iterdir()]


def test_a_point_not_named_does_not_pause(tmp_path):
    env = {
        **os.environ,
        "SAGA_PAUSE_POINTS": "timer.before_fire",
        "SAGA_PAUSE_RATE": "1",
        "SAGA_PAUSE_SECONDS": "30",
        "SAGA_CRASH_REPORT": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
    )
    assert (0, []) == (done.returncode, list(tmp_path.iterdir()))
