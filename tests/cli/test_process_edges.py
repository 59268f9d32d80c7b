"""
The command line as a process: a missing optional extra, a closed stdout.

These run ``saga`` in a subprocess: what they check (an import that fails,
a pipe its reader closed) cannot be staged inside the test's own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga import Engine
from saga.cli import main
from tests import schemas
from tests.helpers import dump

ROOT = Path(__file__).resolve().parents[2]
# `import pika` fails, as where the rabbitmq extra is not installed.
WITHOUT_PIKA = (
    "import sys; sys.modules['pika'] = None; "
    "from saga.cli import main; sys.exit(main(sys.argv[1:]))"
)
UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/%2F"


@pytest.fixture
def upgraded(db_url):
    with Engine(db_url, check_schema=False) as setup:
        schemas.migrate(setup)
    return db_url


def _saga_without_pika(*argv, env=None):
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PIKA, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    ("how", "named"),
    [
        (("--broker", UNREACHABLE), "--broker"),
        ((), "$SAGA_BROKER_URL"),
    ],
)
def test_a_broker_without_the_rabbitmq_extra_is_refused_at_start(upgraded, how, named):
    """Exit 2 naming the extra to install, before any worker starts (not 200 warnings, exit 0)."""
    with Engine(upgraded) as engine:
        before = dump(engine)
    done = _saga_without_pika(
        "worker", "--burst", *how, "--db", upgraded, env={"SAGA_BROKER_URL": UNREACHABLE}
    )
    assert 2 == done.returncode, done.stderr
    assert f"{named}: RabbitMQ needs pika, which is not installed: " in done.stderr
    assert "pip install 'saga-engine[rabbitmq]'" in done.stderr
    assert "workers stopped" not in done.stdout
    with Engine(upgraded) as engine:
        assert before == dump(engine)


def test_without_a_broker_the_missing_extra_does_not_matter(upgraded):
    done = _saga_without_pika("worker", "--burst", "--db", upgraded, env={"SAGA_BROKER_URL": ""})
    assert 0 == done.returncode, done.stderr


def _closed_pipe():
    """A pipe whose reader is already gone: every write to it fails, with no race."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


def test_a_closed_stdout_ends_the_command_quietly(db_url):
    """`saga db upgrade | head -c 120`: the work done, no message, 141 as for a Unix tool."""
    stdout = _closed_pipe()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "saga", "db", "upgrade", "--db", db_url],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
            check=False,
        )
    finally:
        os.close(stdout)
    assert (141, "") == (done.returncode, done.stderr)
    with Engine(db_url) as engine:  # the schema is current: the upgrade ran before the print
        assert engine.db.transaction(lambda tx: tx.scalar("db_now"), write=False) is not None


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_listing_to_a_closed_stdout_ends_quietly(tmp_path, buffered):
    """Buffered (Python's default on a pipe), the write fails only when the output is flushed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    stdout = _closed_pipe()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "saga", "diagram", "--json"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"},
            check=False,
        )
    finally:
        os.close(stdout)
    assert (141, "") == (done.returncode, done.stderr)


def test_another_broken_pipe_is_still_an_error(monkeypatch, capsys):
    """A broken pipe that is not stdout's (a socket, a child) is not silenced."""

    def broken(*_):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("saga.cli.run", broken)
    assert 1 == main(["diagram"])
    assert "unexpected BrokenPipeError" in capsys.readouterr().err
