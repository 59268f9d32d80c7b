"""``saga worker``: worker processes for steps, timers and the application's jobs."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

from saga import validation as _validation
from saga.cli.common import (
    EXIT_OK,
    Command,
    Output,
    add_broker_options,
    add_common_options,
    broker_url,
    exchange,
    open_engine,
    port_number,
    positive_float,
    whole,
)
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse

MAX_WORKERS: Final = 64

FLAGS = {
    "metrics_port": "--metrics-port",
    "concurrency": "--concurrency",
    "batch": "--batch",
    "app": "--app",
    "lease_seconds": "--lease-seconds",
    "queue": "--queue",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``worker``."""
    worker = subparsers.add_parser(
        "worker", help="run worker processes: steps, timers and your jobs"
    )
    worker.add_argument(
        "--concurrency",
        type=whole,
        default=1,
        metavar="N",
        # The supervisor's MAX_CONCURRENCY, written out: importing the supervisor
        # would load the engine for `--help` (a test keeps the two equal).
        help=f"worker processes, 1 to {MAX_WORKERS} (default: 1)",
    )
    worker.add_argument(
        "--burst", action="store_true", help="exit once nothing is due instead of waiting for work"
    )
    worker.add_argument(
        "--batch",
        type=whole,
        default=50,
        metavar="N",
        help="jobs claimed per transaction, 1 to 10000 (default: 50)",
    )
    worker.add_argument(
        "--lease-seconds",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="lease length in seconds; renewed every third while a job runs (default: 30)",
    )
    worker.add_argument(
        "--poll-interval",
        type=positive_float,
        default=1.0,
        metavar="S",
        help="longest sleep between claims when idle, in seconds (default: 1)",
    )
    worker.add_argument(
        "--queue",
        action="append",
        metavar="Q",
        dest="queues",
        help="only this queue (repeatable; default: all)",
    )
    worker.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="N",
        help="serve Prometheus metrics on http://HOST:N/metrics (0 picks a free port)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port (default: 127.0.0.1)",
    )
    add_broker_options(worker)
    add_common_options(worker, top_level=False)
    return {"worker": Command(_worker, FLAGS)}


def _worker(args: argparse.Namespace, out: Output) -> int:
    from saga.core.engine import default_url
    from saga.core.workers.supervisor import (
        MAX_CONCURRENCY,
        Supervisor,
        WorkerOptions,
        WorkersCrashing,
        builtin_handlers,
    )

    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise InvalidInput(
            field="concurrency",
            problem=f"must be between 1 and {MAX_CONCURRENCY}, got {args.concurrency}",
        )
    _validation.batch(args.batch)
    url = default_url() if args.db is None else args.db
    # A bad --app, or an application with problems, fails here: not in every worker.
    with open_engine(args, create=False) as engine:
        engine.db.transaction(lambda tx: tx.scalar("db_now"), write=False)  # reachable, current
        queues = sorted({kind.queue for kind in builtin_handlers(engine)})
        engine.pollers()  # their configuration too (a bad webhook URL): exit 2 here
    for queue in args.queues or ():
        if queue not in queues:
            raise InvalidInput(
                field="queue",
                problem=f"no queue {queue!r}; the known queues are {', '.join(queues)}",
            )
    options = WorkerOptions(
        url=url,
        app=args.app,
        app_options=tuple(
            (option.dest, getattr(args, option.dest, None))
            for option in engine.app.commands.options
        ),
        batch=args.batch,
        lease_seconds=args.lease_seconds,
        poll_interval=args.poll_interval,
        queues=tuple(args.queues) if args.queues else None,
        burst=args.burst,
        log_level=args.log_level,
        broker_url=broker_url(args),
        exchange=exchange(args),
        metrics=args.metrics_port is not None,
    )
    with contextlib.ExitStack() as stack:
        if args.metrics_port is not None:
            _serve_metrics(args, out, stack)
        supervisor = Supervisor(options, concurrency=args.concurrency)
        try:
            report = supervisor.run()
        except WorkersCrashing as exc:
            if exc.last_traceback:
                out.err.write(exc.last_traceback)
            raise
    summary: dict[str, Any] = {**report.as_dict(), "restarts": supervisor.restarts}
    if out.as_json:
        out.json(summary)
    else:
        out.line(
            f"workers stopped: {summary['done']} done, {summary['retried']} retried, "
            f"{summary['dead_lettered']} dead-lettered, {summary['timed_out']} timed out, "
            f"{summary['lost_leases']} lost leases, {summary['restarts']} restarts, "
            f"{summary['published']} events published"
        )
    return EXIT_OK


def _serve_metrics(args: argparse.Namespace, out: Output, stack: contextlib.ExitStack) -> None:
    """Serve /metrics from this process for as long as ``stack`` lives."""
    from saga.core.metrics import MetricsServer

    engine = stack.enter_context(open_engine(args, create=False))
    try:
        server = MetricsServer(engine.db, host=args.metrics_host, port=args.metrics_port)
    except ImportError as exc:  # pragma: no cover - the web extra is in the test extras
        raise InvalidInput(
            field="metrics_port",
            problem=f"needs the web extra: pip install 'saga-engine[web]' ({exc})",
        ) from exc
    except OSError as exc:
        raise InvalidInput(
            field="metrics_port", problem=f"cannot listen on {args.metrics_host}: {exc}"
        ) from exc
    stack.callback(server.close)
    # On stderr, first, so that a supervisor or a test knows where to scrape.
    out.err.write(f"saga worker: metrics on http://{server.host}:{server.port}/metrics\n")
    out.err.flush()
