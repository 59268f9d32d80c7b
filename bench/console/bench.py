"""
How long each console page takes, on an empty engine and with a long history.

    python bench/console/bench.py --db 'postgresql://…?options=-csearch_path%3Dbench_console'

The database (or schema) must be empty.  First some real work through the
engine (purchases with every outcome, worker runs, a dead letter), timed
page by page; then ``--sagas`` finished purchases loaded in bulk
(``../saga/history.sql``: finished purchases as the engine leaves them), timed
again.  Each page is rendered by the console's WSGI application in this
process (Flask's test client: the server's time, no network), ``--runs``
times; the median is reported, and the ratio to the empty case.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from saga import Engine
from saga.core.ops.operators import Operators
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.store.sqlfiles import parse_queries
from saga.core.workers.worker import Worker
from saga.purchase.steps import PurchaseSteps
from saga.queue import NewJob
from saga.web import create_app

PASSWORD = "bench-password-123"  # noqa: S105 - a throwaway account in a bench database
METHODS = ("pm_ok", "pm_declined", "pm_timeout_after_charge", "pm_amount_mismatch", "pm_late")


def real_work(engine: Engine, purchases: int) -> None:
    engine.services.catalogue.add("js", seats=purchases + 10, price="49.00", currency="EUR")
    for n in range(purchases):
        engine.services.purchases.start(
            operation_id=f"op-{n}",
            intensive_id="js",
            student_id=f"s-{n}",
            payment_method=METHODS[n % len(METHODS)],
            hold_seconds=3600,
        )
    kinds = PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter).kinds()
    request = [k for k in kinds if k.name == "purchase.request_payment"]
    Worker(engine.db, Handlers(request), listen=False).run(burst=True)
    queue = Queue(engine.db)
    queue.enqueue(NewJob(id="poison-1", queue="misc", kind="poison", payload={}))
    (job,) = queue.claim(["poison"], batch=1)
    queue.fail(job, error="ValueError: bench", error_class="permanent")
    Operators(engine.db).add("bench", role="operator", password=PASSWORD)


def load_history(engine: Engine, sagas: int) -> float:
    # The purchase bench's history: finished purchases as the engine leaves them.
    queries = parse_queries((Path(__file__).parent.parent / "saga" / "history.sql").read_text())
    started = time.perf_counter()
    with engine.db.engine.begin() as conn:
        for name, query in queries.items():
            if name != "analyze":
                conn.execute(sa.text(query.sql), {"n": sagas})
    with engine.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(queries["analyze"].sql))
    return time.perf_counter() - started


def pages(engine: Engine) -> dict[str, str]:
    item = engine.recon.find()[0]
    return {
        "overview": "/",
        "reconciliation queue": "/recon",
        "reconciliation item": f"/recon/{item.id}",
        "dead letters": "/dlq",
        "sagas (newest)": "/sagas",
        "sagas (confirmed)": "/sagas?kind=purchase&state=confirmed",
        "saga search (operation id)": "/sagas?q=op-1",
        "one saga": f"/sagas/{item.saga_id}",
        "metrics": "/metrics",
    }


def timings(engine: Engine, runs: int) -> dict[str, float]:
    client = create_app(engine, console=True).test_client()
    login = client.get("/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', login).group(1)  # type: ignore[union-attr]
    client.post("/login", data={"csrf": csrf, "name": "bench", "password": PASSWORD})
    found = {}
    for name, path in pages(engine).items():
        seen = []
        for _ in range(runs):
            started = time.perf_counter()
            answer = client.get(path)
            seen.append(time.perf_counter() - started)
            if answer.status_code not in (200, 302):
                sys.exit(f"{path}: {answer.status_code}")
        found[name] = statistics.median(seen)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="an empty PostgreSQL database or schema")
    parser.add_argument("--sagas", type=int, default=100_000)
    parser.add_argument("--purchases", type=int, default=200, help="real work first")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with Engine(args.db, check_schema=False) as setup:
        setup.upgrade()
    with Engine(args.db) as engine:
        real_work(engine, args.purchases)
        empty = timings(engine, args.runs)
        loaded = load_history(engine, args.sagas)
        full = timings(engine, args.runs)
    print(f"history of {args.sagas:,} finished purchases loaded in {loaded:.1f} s")
    print(f"{'page':<30}{'empty (ms)':>12}{f'{args.sagas:,} (ms)':>14}{'ratio':>8}")
    for name in empty:
        print(
            f"{name:<30}{empty[name] * 1000:>12.1f}{full[name] * 1000:>14.1f}"
            f"{full[name] / empty[name]:>8.2f}"
        )
    print(json.dumps({"sagas": args.sagas, "empty_s": empty, "loaded_s": full}))


if __name__ == "__main__":
    main()
