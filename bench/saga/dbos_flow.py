"""
The purchase as a DBOS Transact workflow, for bench/saga: the peer users would pick instead.

Reserve a seat, request the payment from the same instant stub, confirm,
grant access: four steps, each a checkpointed DBOS step, each writing the
bench's own tables in PostgreSQL with one statement (autocommit).  Run as:

    python dbos_flow.py worker --url URL --executor N     # until SIGTERM
    python dbos_flow.py enqueue --url URL --purchases N   # enqueue all, wait, print JSON
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

QUEUE = "purchases"
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS bench_intensives (
    id text PRIMARY KEY, capacity integer NOT NULL, held integer NOT NULL DEFAULT 0,
    taken integer NOT NULL DEFAULT 0, CHECK (held + taken <= capacity));
CREATE TABLE IF NOT EXISTS bench_purchases (
    id text PRIMARY KEY, state text NOT NULL, payment_id text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(), done_at timestamptz);
CREATE TABLE IF NOT EXISTS bench_access (purchase_id text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS bench_ready (executor text PRIMARY KEY);
"""


def setup(url: str, purchases: int) -> None:
    """The bench's tables: one intensive with a seat for everyone."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        conn.execute(
            "INSERT INTO bench_intensives (id, capacity) VALUES ('js', %s)", (purchases + 10,)
        )


def worker(url: str, executor: str, concurrency: int) -> None:
    """One worker process: DBOS launched on the queue until SIGTERM."""
    from dbos import DBOS

    pool = ConnectionPool(url, min_size=2, max_size=concurrency + 2, kwargs={"autocommit": True})

    @DBOS.step()
    def reserve(purchase_id: str) -> None:
        with pool.connection() as conn:
            conn.execute(
                "UPDATE bench_intensives SET held = held + 1 "
                "WHERE id = 'js' AND held + taken < capacity"
            )
            conn.execute(
                "INSERT INTO bench_purchases (id, state) VALUES (%s, 'reserved') "
                "ON CONFLICT (id) DO NOTHING",
                (purchase_id,),
            )

    @DBOS.step()
    def request_payment(purchase_id: str) -> str:
        return f"pay_{purchase_id}"  # the instant stub: paid, at once

    @DBOS.step()
    def confirm(purchase_id: str, payment_id: str) -> None:
        with pool.connection() as conn, conn.transaction():
            conn.execute(
                "UPDATE bench_purchases SET state = 'confirmed', payment_id = %s "
                "WHERE id = %s AND state = 'reserved'",
                (payment_id, purchase_id),
            )
            conn.execute(
                "UPDATE bench_intensives SET held = held - 1, taken = taken + 1 WHERE id = 'js'"
            )

    @DBOS.step()
    def grant_access(purchase_id: str) -> None:
        with pool.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO bench_access (purchase_id) VALUES (%s) ON CONFLICT DO NOTHING",
                (purchase_id,),
            )
            conn.execute(
                "UPDATE bench_purchases SET done_at = clock_timestamp() WHERE id = %s",
                (purchase_id,),
            )

    @DBOS.workflow(name="purchase")
    def purchase(purchase_id: str) -> None:
        reserve(purchase_id)
        payment_id = request_payment(purchase_id)
        confirm(purchase_id, payment_id)
        grant_access(purchase_id)

    DBOS(
        config={
            "name": "saga-bench",
            "system_database_url": url,
            "executor_id": executor,
            "log_level": "ERROR",
        }
    )
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.05)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO bench_ready (executor) VALUES (%s)", (executor,))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


def enqueue(url: str, purchases: int, workers: int) -> dict[str, Any]:
    """Enqueue every purchase, wait until all are done; the timings (seconds)."""
    from dbos import DBOSClient

    with psycopg.connect(url, autocommit=True) as conn:
        # The workers create DBOS's tables and register the queue when they launch.
        while conn.execute("SELECT count(*) FROM bench_ready").fetchone() != (workers,):
            time.sleep(0.1)
    client = DBOSClient(system_database_url=url)
    started = time.perf_counter()
    for n in range(purchases):
        client.enqueue({"queue_name": QUEUE, "workflow_name": "purchase"}, f"p{n}")
    accepted = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            (done,) = conn.execute("SELECT count(*) FROM bench_access").fetchone()  # type: ignore[misc]
            if done >= purchases:
                break
            time.sleep(0.05)
        latencies = [
            row[0]
            for row in conn.execute(
                "SELECT extract(epoch FROM done_at - created_at) FROM bench_purchases"
            )
        ]
    finished = time.perf_counter()
    client.destroy()
    return {
        "accept_s": accepted - started,
        "total_s": finished - started,
        "latencies_s": [float(x) for x in latencies],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("setup", "worker", "enqueue"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--executor", default="w0")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--purchases", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.mode == "setup":
        setup(args.url, args.purchases)
    elif args.mode == "worker":
        worker(args.url, args.executor, args.concurrency)
    else:
        print(json.dumps(enqueue(args.url, args.purchases, args.workers)))


if __name__ == "__main__":
    main()
