"""``saga worker``, ``saga stats`` and ``saga dlq list|replay``."""

from __future__ import annotations

import contextlib
import signal
import sys
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
    operator_name,
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
    "rate": "--rate",
    "limit": "--limit",
    "app": "--app",
    "actor": "--actor",
    "reason": "--reason",
    "lease_seconds": "--lease-seconds",
    "queue": "--queue",
    "yes": "--yes",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``worker``, ``stats`` and ``dlq``."""
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

    stats = subparsers.add_parser("stats", help="queue, reconciliation and saga figures")
    add_common_options(stats, top_level=False)

    dlq = subparsers.add_parser("dlq", help="dead letters and their replay")
    dlq_commands = dlq.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = dlq_commands.add_parser("list", help="dead letters, oldest first")
    _add_filters(listing)
    listing.add_argument(
        "--limit", type=whole, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_common_options(listing, top_level=False)

    replay = dlq_commands.add_parser(
        "replay", help="give dead letters a fresh set of attempts (audited)"
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", metavar="ID", help="one dead letter")
    which.add_argument(
        "--all", action="store_true", help="every dead letter (narrow with --queue/--kind)"
    )
    replay.add_argument("--queue", metavar="Q", help="only this queue (with --all)")
    replay.add_argument("--kind", metavar="K", help="only this job kind (with --all)")
    replay.add_argument(
        "--batch",
        type=whole,
        default=100,
        metavar="N",
        help="dead letters read per round, 1 to 10000 (default: 100)",
    )
    replay.add_argument(
        "--rate", type=positive_float, metavar="PER_S", help="at most this many replays per second"
    )
    replay.add_argument("--dry-run", action="store_true", help="list, change nothing")
    replay.add_argument(
        "--yes",
        action="store_true",
        help="replay --all without asking (required when stdin is not a terminal)",
    )
    replay.add_argument("--reason", metavar="TEXT", help="why, for the audit trail")
    replay.add_argument(
        "--actor",
        metavar="NAME",
        default=None,
        help="who, for the audit trail (default: your user name)",
    )
    add_common_options(replay, top_level=False)

    return {
        "worker": Command(_worker, FLAGS),
        "stats": Command(_stats_command, FLAGS),
        "dlq list": Command(_dlq_list, FLAGS),
        "dlq replay": Command(_dlq_replay, FLAGS),
    }


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", metavar="Q", help="only this queue")
    parser.add_argument("--kind", metavar="K", help="only this job kind")


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


def _stats_command(args: argparse.Namespace, out: Output) -> int:
    from saga.core.ops import stats as _stats

    with open_engine(args, create=False) as engine:
        figures = _stats.collect(engine.db)
        figures["application"] = {"name": engine.app.name, **engine.app.figures(engine)}
    if out.as_json:
        out.json(figures)
        return EXIT_OK
    out.table(
        ("QUEUE", "PENDING", "DUE", "RUNNING", "EXPIRED", "FAILED", "OLDEST DUE (s)", "DONE"),
        (
            (
                name,
                q["pending"],
                q["due"],
                q["running"],
                q["expired_leases"],
                q["failed"],
                q["oldest_pending_age_s"],
                q["done"],
            )
            for name, q in figures["queues"].items()
        ),
    )
    backlog = figures["reconciliation"]
    out.line()
    out.line(
        f"reconciliation: {backlog['open']} open ({backlog['escalated']} with operators, "
        f"{backlog['overdue']} OVERDUE, {backlog['review']} for review), "
        f"oldest {backlog['oldest_age_s']} s"
    )
    outbox = figures["outbox"]
    out.line(
        f"outbox: {outbox['unpublished']} unpublished (oldest {outbox['oldest_unpublished_age_s']}"
        f" s), {outbox['publish_rate_per_s']} published/s over the last minute, "
        f"{outbox['broker_errors']} broker errors"
        + (f" (last: {outbox['last_error']})" if outbox["last_error"] else "")
    )
    out.line()
    out.table(("SAGA STATE", "COUNT"), sorted(figures["sagas"].items()))
    application = figures["application"]
    extra = {name: value for name, value in application.items() if name != "name"}
    if extra:
        out.line()
        out.line(f"{application['name']}: {extra}")
    return EXIT_OK


def _dlq_list(args: argparse.Namespace, out: Output) -> int:
    from saga.core.queue.dead_letters import (
        DeadLetters,
        Filter,
        dead_letter_json,
    )

    with open_engine(args, create=False) as engine:
        letters = DeadLetters(engine.db).find(
            Filter(queue=args.queue, kind=args.kind), limit=args.limit
        )
    if out.as_json:
        out.json([dead_letter_json(letter) for letter in letters])
        return EXIT_OK
    out.table(
        ("JOB", "KIND", "ATTEMPTS", "REASON", "FAILED AT", "LAST ERROR"),
        (
            (
                d.id,
                d.kind,
                f"{d.attempts}/{d.max_attempts}",
                d.error_class,
                d.finished_at.isoformat(timespec="seconds") if d.finished_at else "",
                (d.last_error or "")[:80],
            )
            for d in letters
        ),
    )
    return EXIT_OK


def _dlq_replay(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    from saga.core.queue.dead_letters import (
        DeadLetters,
        Filter,
    )
    from saga.core.queue.leases import Queue

    if args.job is not None and (args.queue or args.kind):
        raise InvalidInput(
            field="job", problem="--job replays one job; --queue/--kind go with --all"
        )
    _validation.batch(args.batch)
    if args.all and not (args.yes or args.dry_run or _confirmed(out)):
        raise InvalidInput(
            field="yes",
            problem="--all replays every dead letter: confirm with --yes "
            "(or answer the question on a terminal); nothing was replayed",
        )
    where = Filter(job_id=args.job, queue=args.queue, kind=args.kind)
    actor = args.actor or operator_name()
    stop = {"requested": False}

    def request_stop(*_: object) -> None:
        stop["requested"] = True

    previous = signal.signal(signal.SIGINT, request_stop)
    try:
        with open_engine(args) as engine:
            letters = DeadLetters(engine.db)
            if args.job is not None:
                Queue(engine.db).get(args.job)  # NotFound (exit 4) for an id never accepted
            total = len(letters.find(where, limit=100_000))
            with tqdm(
                total=total,
                unit="job",
                file=sys.stderr,
                disable=out.as_json or args.dry_run or total < 2,
            ) as bar:
                report = letters.replay(
                    where,
                    actor=actor,
                    reason=args.reason,
                    batch=args.batch,
                    rate=args.rate,
                    dry_run=args.dry_run,
                    progress=bar.update,
                    should_stop=lambda: stop["requested"],
                )
    finally:
        signal.signal(signal.SIGINT, previous)
    if out.as_json:
        out.json(report.to_json())
    elif args.dry_run:
        out.line(
            f"would replay {len(report.replayed)} dead letter(s): {', '.join(report.replayed)}"
        )
    else:
        state = " (stopped early)" if report.stopped else ""
        out.line(
            f"replayed {len(report.replayed)} dead letter(s), "
            f"skipped {len(report.skipped)} already resolved{state}"
        )
    return EXIT_OK


def _confirmed(out: Output) -> bool:
    """Ask on a terminal whether to replay every dead letter; ``False`` when not interactive."""
    if not sys.stdin.isatty():
        return False
    out.err.write("replay every dead letter matching the filters? [y/N] ")
    out.err.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")
