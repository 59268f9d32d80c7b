"""
``saga console`` and ``saga webhook serve``: a SIGTERM as soon as they listen is a clean stop.

Their handlers are in place before the ``listening`` line is printed: a
supervisor (or a test) that stops a server right after it started gets exit
0, not death by the signal (-15).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.integration.test_webhook_endpoint import SECRET

TRIES = 3


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def stopped_at_once(shop, command: str) -> tuple[int, str]:
    """Start ``saga <command>``, SIGTERM it the moment it says it listens; its code and output."""
    url = shop.db.url.render_as_string(hide_password=False)
    env = {**os.environ, "SAGA_WEBHOOK_SECRET_SANDBOX": SECRET}
    argv = [
        *(sys.executable, "-m", "saga", *command.split(), "--port", "0", "--db", url),
        *("--sandbox-db", shop.services.sandbox_url, "--log-level", "error"),
    ]
    with subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as server:
        assert server.stderr is not None
        first = server.stderr.readline()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
        assert f"saga {command}: listening on http://" in first, first + err
        return server.returncode, out


@pytest.mark.slow
@pytest.mark.parametrize("command", ["webhook serve", "console"])
def test_a_sigterm_right_after_listening_is_a_clean_stop(shop, command):
    """Three tries each: exit 0 and the 'stopped' line every time."""
    for _ in range(TRIES):
        code, out = stopped_at_once(shop, command)
        assert (0, f"saga {command}: stopped") == (code, out.strip())
