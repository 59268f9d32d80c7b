"""Helpers for end-to-end purchase tests: run workers until nothing is due."""

from __future__ import annotations

import json
import time

from saga import Engine
from saga.cli import main
from saga.core.queue.leases import Queue
from saga.core.workers.supervisor import builtin_handlers


def cli(*argv: str) -> int:
    """Run `saga` in-process; the exit code."""
    return main(list(argv))


def cli_json(capsys, *argv: str):
    """Run `saga … --json` in-process; the exit code and the parsed output."""
    capsys.readouterr()
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else None)


def next_due(url: str) -> float | None:
    """Seconds until a job or a sandbox webhook is due; ``None`` if nothing waits."""
    with Engine(url) as engine:
        kinds = builtin_handlers(engine).names()
        waits = [Queue(engine.db).next_due_in(kinds), engine.services.sandbox.next_webhook_in()]
    due = [wait for wait in waits if wait is not None]
    return min(due) if due else None


def settle(url: str, *, horizon: float = 12.0, rounds: int = 30) -> None:
    """`saga worker --burst` until nothing is due within ``horizon`` seconds."""
    for _ in range(rounds):
        code = main(
            [
                "worker",
                "--burst",
                "--db",
                url,
                "--concurrency",
                "2",
                "--poll-interval",
                "0.1",
                "--lease-seconds",
                "5",
                "--log-level",
                "error",
            ]
        )
        assert 0 == code
        wait = next_due(url)
        if wait is None or wait > horizon:
            return
        time.sleep(wait + 0.05)
    raise AssertionError("the purchases did not settle")
