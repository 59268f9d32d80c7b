"""
The systems under test: how each one gets its schema, takes 20,000 no-op
jobs, and works them in a worker process released by a start gate.

Every system runs at its defaults unless a variant says otherwise; the
engine runs with its own defaults (batch 50, lease 30 s, LISTEN/NOTIFY).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg


def quiet() -> None:
    """Keep every system's logs at WARNING: logging is not what we measure."""
    logging.basicConfig(level=logging.WARNING)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


@dataclass(frozen=True)
class System:
    """One configuration of one queue."""

    name: str
    kind: str  # saga | procrastinate | pgqueuer
    options: dict[str, Any] = field(default_factory=dict)


# -- the engine ----------------------------------------------------------------------


def saga_setup(dsn: str) -> None:
    from saga import Engine

    with Engine(dsn, check_schema=False) as engine:
        engine.upgrade()


def saga_enqueue(dsn: str, jobs: int) -> None:
    from saga import Engine
    from saga.core.queue.leases import Queue
    from saga.queue import NewJob

    with Engine(dsn) as engine:
        Queue(engine.db).enqueue_many(
            [NewJob(id=f"job-{n}", queue="bench", kind="noop") for n in range(jobs)]
        )


def saga_work(dsn: str, gate: Any, options: dict[str, Any]) -> None:
    from saga import Engine
    from saga.core.queue.kinds import Handlers, JobKind
    from saga.core.workers.worker import Worker

    with Engine(dsn) as engine:
        worker = Worker(
            engine.db,
            Handlers([JobKind("noop", lambda job: None, queue="bench")]),
            batch=options.get("batch", 50),
        )
        engine.services.catalogue.list(limit=1)  # connect before the gate
        gate.wait()
        worker.run(burst=True)


# -- procrastinate ---------------------------------------------------------------------


def _procrastinate_app(dsn: str) -> Any:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    def noop() -> None:
        return None

    return app, noop


def procrastinate_setup(dsn: str) -> None:
    app, _ = _procrastinate_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()


def procrastinate_enqueue(dsn: str, jobs: int) -> None:
    app, noop = _procrastinate_app(dsn)
    with app.open():
        for start in range(0, jobs, 1000):
            noop.batch_defer(*([{}] * min(1000, jobs - start)))


def procrastinate_work(dsn: str, gate: Any, options: dict[str, Any]) -> None:
    app, _ = _procrastinate_app(dsn)
    gate.wait()
    app.run_worker(wait=False, install_signal_handlers=False, **options)


# -- pgqueuer ----------------------------------------------------------------------------


def pgqueuer_setup(dsn: str) -> None:
    async def main() -> None:
        from pgqueuer import PsycopgDriver, Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await Queries(PsycopgDriver(conn)).install()

    asyncio.run(main())


def pgqueuer_enqueue(dsn: str, jobs: int) -> None:
    async def main() -> None:
        from pgqueuer import PsycopgDriver, Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            queries = Queries(PsycopgDriver(conn))
            for start in range(0, jobs, 1000):
                size = min(1000, jobs - start)
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)

    asyncio.run(main())


def pgqueuer_work(dsn: str, gate: Any, options: dict[str, Any]) -> None:
    async def main() -> None:
        from pgqueuer import PsycopgDriver, Queries, QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            manager = QueueManager(Queries(PsycopgDriver(conn)))

            @manager.entrypoint("noop")
            async def noop(job: Any) -> None:
                return None

            await asyncio.to_thread(gate.wait)
            await manager.run(mode=QueueExecutionMode.drain, **options)

    asyncio.run(main())


_DONE_SQL = {
    "saga": "SELECT count(*) FROM job_archive",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    # pgqueuer deletes a job when it finishes: done = enqueued - still queued.
    "pgqueuer": "SELECT %(jobs)s - count(*) FROM pgqueuer",
}


def done(kind: str, conn: psycopg.Connection[Any], jobs: int) -> int:
    """How many of the ``jobs`` enqueued are finished."""
    row = conn.execute(_DONE_SQL[kind], {"jobs": jobs}).fetchone()
    return int(row[0]) if row else 0


def saga_done(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return done("saga", conn, 0)


SETUP = {"saga": saga_setup, "procrastinate": procrastinate_setup, "pgqueuer": pgqueuer_setup}
ENQUEUE = {
    "saga": saga_enqueue,
    "procrastinate": procrastinate_enqueue,
    "pgqueuer": pgqueuer_enqueue,
}
WORK = {"saga": saga_work, "procrastinate": procrastinate_work, "pgqueuer": pgqueuer_work}


def run_worker(kind: str, dsn: str, gate: Any, options: dict[str, Any]) -> None:
    """Entry point of one worker process."""
    quiet()
    WORK[kind](dsn, gate, options)
