"""Run a function in many processes at once, released together by a barrier."""

from __future__ import annotations

import multiprocessing
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_CONTEXT = multiprocessing.get_context("forkserver")
# Children fork from a clean server that already imported the engine: they
# start fast and inherit none of the test process's sockets.
_CONTEXT.set_forkserver_preload(["saga", "tests.parallel"])


def _run(target: Callable[..., Any], args: tuple[Any, ...], barrier: Any, results: Any) -> None:
    try:
        prepared = target(*args, prepare=True)
        barrier.wait(timeout=60)
        results.put(("ok", target(*args, prepared=prepared)))
    except Exception:  # noqa: BLE001 - reported to the parent
        results.put(("crash", traceback.format_exc()))


def race(target: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> list[Any]:
    """
    Call ``target(*args, prepare=True)`` in one process per ``args``, wait until
    all are ready, then ``target(*args, prepared=<that result>)`` at once.

    ``target`` must be a module-level function.  Returns the results, in no
    particular order; a crash in any child fails the caller.
    """
    barrier = _CONTEXT.Barrier(len(calls))
    results = _CONTEXT.Queue()
    processes = [
        _CONTEXT.Process(target=_run, args=(target, args, barrier, results)) for args in calls
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    crashes = [detail for kind, detail in outcomes if kind == "crash"]
    assert not crashes, crashes[0]
    return [value for _, value in outcomes]
