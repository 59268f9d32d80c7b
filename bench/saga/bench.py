"""
The happy-path purchase end to end: the engine, its floor, and DBOS Transact, in one run.

For N purchases and K worker processes, on PostgreSQL (and the engine alone on
SQLite): accept every purchase from one client while the workers run, until
every one is confirmed with access granted; the provider answers at once
(``instant.py``), so it is not what is measured.  Reported per system:
purchases/s end to end, acceptance rate, accept-to-access latency p50/p99
(database clock), transactions per purchase (counted by PostgreSQL's
``pg_stat_database``, the bench's own polling subtracted), peak worker RSS.
In the same run: the floors (pgbench, one single-row UPDATE per transaction,
one row per client, K clients; SQLite: a plain ``sqlite3`` loop of the same;
and the engine's own statements replayed without it, ``replay.py``: on
PostgreSQL as captured and pipelined, on SQLite in a plain ``sqlite3``
loop), and DBOS Transact running the same four steps (``dbos_flow.py``)
with K worker processes on the same server.  Medians of ``--runs``.

    bench/saga/run [--purchases 1000] [--workers 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from replay import Captured, Recorder, load, replay, replay_sqlite

HERE = Path(__file__).resolve().parent
DATABASE = os.environ.get("SAGA_BENCH_DATABASE", "saga_purchase_bench")
POLL_S = 0.05


class Peak:
    """The largest resident set of any descendant of a process, sampled while it runs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            parents: dict[int, int] = {}
            rss: dict[int, int] = {}
            for status in Path("/proc").glob("[0-9]*/status"):
                try:
                    fields = dict(
                        line.split(":", 1)
                        for line in status.read_text().splitlines()
                        if ":" in line
                    )
                except OSError:
                    continue
                pid = int(status.parent.name)
                parents[pid] = int(fields.get("PPid", "0").strip())
                rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
            for pid, resident in rss.items():
                ancestor = parents.get(pid)
                while ancestor and ancestor != self.root:
                    ancestor = parents.get(ancestor)
                if ancestor == self.root:
                    self.peak_kb = max(self.peak_kb, resident)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def fresh_database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return admin.rsplit("/", 1)[0] + f"/{name}"


def transactions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def settle_stats() -> None:
    time.sleep(0.7)  # pg_stat_database is flushed by backends about every half second


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def engine_run(
    url: str, purchases: int, workers: int, history: int = 0, capture: Path | None = None
) -> dict[str, Any]:
    """
    One run of the engine: workers up, purchases accepted, all granted (after ``history``).

    With ``capture``, every transaction of the engine's (the acceptances and
    the workers') is kept there for :func:`replay_floor`.
    """
    from saga import Engine

    with Engine(url, check_schema=False) as setup:
        setup.upgrade()
        if history:
            load_history(setup, history)
    counts_dir = tempfile.mkdtemp(prefix="saga-bench-count-")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(HERE), str(HERE / "count"), os.environ.get("PYTHONPATH", "")]
        ),
        "SAGA_BENCH_COUNT": counts_dir,
        **({"SAGA_BENCH_CAPTURE": str(capture)} if capture else {}),
    }
    with Engine(url, app=_instant_app()) as engine:
        _catalogue(engine, purchases)
        dialect = engine.db.dialect
        # The acceptances' transactions, kept (for the count, and the replay).
        recorder = Recorder(None if engine.db._pool else engine.db.engine)
        if engine.db._pool is not None:  # SQLite: the engine runs on the stdlib driver
            recorder.watch_pool(engine.db._pool)
        command = [
            *(sys.executable, "-m", "saga", "worker", "--concurrency", str(workers)),
            *(
                "--app",
                "instant:app",
                "--db",
                url,
                "--poll-interval",
                "0.05",
                "--log-level",
                "error",
            ),
        ]
        settle_stats()
        before = transactions(url) if dialect == "postgres" else 0
        supervisor = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        peak = Peak(supervisor.pid)
        polls = 0
        try:
            started = time.perf_counter()
            for n in range(purchases):
                engine.services.purchases.start(
                    operation_id=f"op-{n}", intensive_id="js", student_id=f"s-{n}"
                )
            accepted = time.perf_counter()
            recorder.recording = False
            while _granted(engine) < purchases:
                polls += 1
                time.sleep(POLL_S)
            finished = time.perf_counter()
            finished_ns = time.monotonic_ns()
            engine_tx = len(recorder.done)
            engine_statements = sum(len(tx.statements) for tx in recorder.done)
        finally:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(timeout=60)
            rss = peak.stop()
        latencies = _latencies(engine)
    if capture is not None:
        recorder.dump(capture, "client")
        (capture / "finished").write_text(str(finished_ns))
    settle_stats()
    for dump in Path(counts_dir).glob("*.json"):
        figures = json.loads(dump.read_text())
        engine_tx += figures["commits"] + figures["rollbacks"]
        engine_statements += figures["statements"]
    shutil.rmtree(counts_dir)
    counted = transactions(url) - before - polls - 1 if dialect == "postgres" else None
    stats = [_timed([sys.executable, "-m", "saga", "stats", "--db", url]) for _ in range(3)]
    return {
        "stats_s": statistics.median(stats),
        "purchases_per_s": purchases / (finished - started),
        "accepts_per_s": purchases / (accepted - started),
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "engine_transactions_per_purchase": engine_tx / purchases,
        "statements_per_purchase": engine_statements / purchases,
        "transactions_per_purchase": None if counted is None else counted / purchases,
        "peak_worker_rss_mb": rss,
    }


def _catalogue(engine: Any, purchases: int) -> None:
    engine.services.catalogue.add("js", seats=purchases + 10, price="49.00", currency="EUR")


def replay_floor(admin_url: str, purchases: int, workers: int) -> dict[str, Any]:
    """
    The engine's own statements without the engine (``replay.py``), purchases/s.

    An untimed engine run captures every transaction on one database; they
    run again on a fresh one set up the same way (schema, intensive).  The
    transactions that began after the last purchase was granted (the
    workers' idle claims before they stopped) are left out.
    """
    captured = _captured(fresh_database(admin_url, DATABASE), purchases, workers)
    url = fresh_database(admin_url, DATABASE)
    _set_up(url, purchases)
    found = _replayed(purchases, replay(url, captured))
    url = fresh_database(admin_url, DATABASE)
    _set_up(url, purchases)
    pipelined = _replayed(purchases, replay(url, captured, pipelined=True))
    found["pipelined_per_s"] = pipelined["purchases_per_s"]
    found["pipelined_failed"] = pipelined["failed"]
    return found


def replay_floor_sqlite(purchases: int, workers: int) -> dict[str, Any]:
    """The same on SQLite: the captured statements in a plain ``sqlite3`` loop."""
    with tempfile.TemporaryDirectory() as tmp:
        captured = _captured(f"sqlite:///{tmp}/capture.db", purchases, workers)
        path = f"{tmp}/replay.db"
        _set_up(f"sqlite:///{path}", purchases)
        return _replayed(purchases, replay_sqlite(path, captured))


def _captured(url: str, purchases: int, workers: int) -> list[Captured]:
    capture = Path(tempfile.mkdtemp(prefix="saga-bench-capture-"))
    try:
        engine_run(url, purchases, workers, capture=capture)
        finished = int((capture / "finished").read_text())
        return [tx for tx in load(capture) if tx.began <= finished]
    finally:
        shutil.rmtree(capture)


def _set_up(url: str, purchases: int) -> None:
    from saga import Engine

    with Engine(url, check_schema=False) as setup:
        setup.upgrade()
    with Engine(url, app=_instant_app()) as engine:
        _catalogue(engine, purchases)


def _replayed(purchases: int, done: Any) -> dict[str, Any]:
    return {
        "purchases_per_s": purchases / done.seconds,
        "transactions": done.transactions,
        "statements": done.statements,
        "failed": done.failed,
        "connections": done.connections,
    }


def load_history(engine: Any, sagas: int) -> None:
    """``sagas`` finished purchases, as the engine leaves them (``history.sql``), then ANALYZE."""
    import sqlalchemy as sa

    from saga.core.store.sqlfiles import parse_queries

    started = time.perf_counter()
    queries = parse_queries((HERE / "history.sql").read_text())
    with engine.db.engine.begin() as conn:
        for query in queries.values():
            if query.name != "analyze":
                conn.execute(sa.text(query.sql), {"n": sagas})
    with engine.db.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE"))
    print(f"history: {sagas:,} finished purchases loaded in {time.perf_counter() - started:.0f} s")


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _instant_app() -> Any:
    sys.path.insert(0, str(HERE))
    import instant

    return instant.app()


def _granted(engine: Any) -> int:
    """Purchases of the bench's intensive with access (a taken seat: the same transaction)."""
    with engine.db.engine.connect() as conn:
        conn.execution_options(sqlite_begin="DEFERRED")  # a reader: no write lock
        return int(conn.exec_driver_sql("SELECT taken FROM intensives WHERE id = 'js'").scalar())


def _latencies(engine: Any) -> list[float]:
    query = (
        "SELECT extract(epoch FROM a.granted_at - s.created_at) FROM access_grants a "
        "JOIN sagas s ON s.id = a.saga_id WHERE left(a.saga_id, 5) <> 'hist-'"
        if engine.db.dialect == "postgres"
        else "SELECT (julianday(a.granted_at) - julianday(s.created_at)) * 86400.0 "
        "FROM access_grants a JOIN sagas s ON s.id = a.saga_id"
    )
    with engine.db.engine.connect() as conn:
        return [float(row[0]) for row in conn.exec_driver_sql(query).all()]


def dbos_run(url: str, purchases: int, workers: int, python: str) -> dict[str, Any]:
    """One run of DBOS Transact: K worker processes, the purchases enqueued, all granted."""
    flow = str(HERE / "dbos_flow.py")
    subprocess.run([python, flow, "setup", "--url", url, "--purchases", str(purchases)], check=True)
    settle_stats()
    before = transactions(url)
    procs = [
        subprocess.Popen(
            [python, flow, "worker", "--url", url, "--executor", f"w{n}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in range(workers)
    ]
    peaks = [Peak(os.getpid())]
    try:
        done = subprocess.run(
            [
                python,
                flow,
                "enqueue",
                "--url",
                url,
                "--purchases",
                str(purchases),
                "--workers",
                str(workers),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        rss = max(peak.stop() for peak in peaks)
    settle_stats()
    timing = json.loads(done.stdout)
    counted = transactions(url) - before
    return {
        "purchases_per_s": purchases / timing["total_s"],
        "accepts_per_s": purchases / timing["accept_s"],
        "p50_s": percentile(timing["latencies_s"], 0.5),
        "p99_s": percentile(timing["latencies_s"], 0.99),
        "transactions_per_purchase": counted / purchases,
        "peak_worker_rss_mb": rss,
    }


def pgbench_floor(url: str, clients: int, seconds: int) -> float:
    """TPS of single-row UPDATE transactions, one row per client."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE floor_rows (id integer PRIMARY KEY, n bigint NOT NULL)")
        conn.execute(
            "INSERT INTO floor_rows SELECT g, 0 FROM generate_series(1, %s) AS g", (clients,)
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write("UPDATE floor_rows SET n = n + 1 WHERE id = :client_id + 1;\n")
    done = subprocess.run(
        [
            "pgbench",
            "-n",
            "-c",
            str(clients),
            "-j",
            str(clients),
            "-T",
            str(seconds),
            "-f",
            script.name,
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    Path(script.name).unlink()
    line = next(x for x in done.stdout.splitlines() if x.startswith("tps"))
    return float(line.split("=")[1].split()[0])


def sqlite_floor(path: Path, seconds: float) -> float:
    """Commits per second of single-row UPDATEs in a plain sqlite3 loop (WAL, as the engine)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE floor_rows (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    conn.execute("INSERT INTO floor_rows VALUES (1, 0)")
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE floor_rows SET n = n + 1 WHERE id = 1")
        conn.execute("COMMIT")
        count += 1
    conn.close()
    return count / (time.perf_counter() - started)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        key: (None if runs[0][key] is None else statistics.median(r[key] for r in runs))
        for key in runs[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--purchases", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--dbos-python", default=sys.executable, help="a python with dbos")
    parser.add_argument("--skip-dbos", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="also run the engine on PostgreSQL with this many finished purchases loaded first",
    )
    args = parser.parse_args()
    n, k = args.purchases, args.workers
    results: dict[str, Any] = {"purchases": n, "workers": k, "runs": args.runs}
    ours, peer, floors, lite, lite_floor, aged, replays = [], [], [], [], [], [], []
    lite_replays: list[dict[str, Any]] = []
    for _ in range(args.runs):
        ours.append(engine_run(fresh_database(args.admin_url, DATABASE), n, k))
        if not args.skip_replay:
            replays.append(replay_floor(args.admin_url, n, k))
        if args.history:
            url = fresh_database(args.admin_url, DATABASE)
            aged.append(engine_run(url, n, k, history=args.history))
        if not args.skip_dbos:
            peer.append(dbos_run(fresh_database(args.admin_url, DATABASE), n, k, args.dbos_python))
        floors.append(pgbench_floor(fresh_database(args.admin_url, DATABASE), k, 10))
        with tempfile.TemporaryDirectory() as tmp:
            lite.append(engine_run(f"sqlite:///{tmp}/bench.db", n, k))
            lite_floor.append(sqlite_floor(Path(tmp) / "floor.db", 5.0))
        if not args.skip_replay:
            lite_replays.append(replay_floor_sqlite(n, k))
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
        )
    results["postgres"] = {"engine": median_of(ours), "floor_tps": statistics.median(floors)}
    if aged:
        results["postgres"]["engine_with_history"] = median_of(aged)
        results["history"] = args.history
    if peer:
        results["postgres"]["dbos"] = median_of(peer)
    if replays:
        results["postgres"]["replay"] = median_of(replays)
    results["sqlite"] = {"engine": median_of(lite), "floor_tps": statistics.median(lite_floor)}
    if lite_replays:
        results["sqlite"]["replay"] = median_of(lite_replays)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def report(results: dict[str, Any]) -> None:
    n, k = results["purchases"], results["workers"]
    print(f"{n} purchases, {k} worker processes, medians of {results['runs']} runs")
    head = ("system", "purch/s", "accept/s", "p50 ms", "p99 ms", "tx", "stmts", "server tx")
    head += ("RSS MB",)
    print(f"{head[0]:<28}" + "".join(f"{h:>10}" for h in head[1:]))
    rows = [("PostgreSQL: engine", results["postgres"]["engine"])]
    if "engine_with_history" in results["postgres"]:
        aged = f"  + {results['history']:,} done"
        rows.append((aged, results["postgres"]["engine_with_history"]))
    if "dbos" in results["postgres"]:
        rows.append(("PostgreSQL: DBOS Transact", results["postgres"]["dbos"]))
    rows.append(("SQLite: engine", results["sqlite"]["engine"]))

    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for name, r in rows:
        cells = [
            f"{r['purchases_per_s']:.1f}",
            f"{r['accepts_per_s']:.1f}",
            f"{r['p50_s'] * 1000:.0f}",
            f"{r['p99_s'] * 1000:.0f}",
            figure(r.get("engine_transactions_per_purchase")),
            figure(r.get("statements_per_purchase")),
            figure(r["transactions_per_purchase"]),
            f"{r['peak_worker_rss_mb']:.0f}",
        ]
        print(f"{name:<28}" + "".join(f"{c:>10}" for c in cells))
    print(
        "tx, stmts: per purchase, counted in the engine's processes; "
        "server tx: counted by PostgreSQL (pg_stat_database), with the one each listening "
        "session runs per notification it receives"
    )
    pg = results["postgres"]
    engine = pg["engine"]
    tps = pg["floor_tps"]
    print(f"pgbench single-row UPDATE, {k} clients: {tps:.0f} TPS; / 5 = {tps / 5:.0f} purchases/s")
    ratios = {"engine / (pgbench / 5)": engine["purchases_per_s"] / (tps / 5)}
    per = engine["engine_transactions_per_purchase"]
    if per:
        ratios[f"engine / (pgbench / its own {per:.1f} tx)"] = engine["purchases_per_s"] / (
            tps / per
        )
    if "replay" in pg:
        ratios["engine / replay of its own statements"] = _replay_ratio("PostgreSQL", pg)
        if "pipelined_per_s" in pg["replay"]:
            again = pg["replay"]
            print(
                "PostgreSQL: the same, one round trip per transaction (pipeline mode): "
                f"{again['pipelined_per_s']:.1f} purchases/s "
                f"({again['pipelined_failed']:.0f} failed)"
            )
            ratios["engine / pipelined replay"] = (
                engine["purchases_per_s"] / again["pipelined_per_s"]
            )
            ratios["pipelined replay / (pgbench / 5)"] = again["pipelined_per_s"] / (tps / 5)
    if "dbos" in pg:
        ratios["engine / DBOS Transact"] = engine["purchases_per_s"] / pg["dbos"]["purchases_per_s"]
    lite = results["sqlite"]
    ratios[f"SQLite engine / (sqlite3 loop {lite['floor_tps']:.0f}/s / 5)"] = lite["engine"][
        "purchases_per_s"
    ] / (lite["floor_tps"] / 5)
    if "replay" in lite:
        ratios["SQLite engine / replay of its own statements"] = _replay_ratio("SQLite", lite)
    if "engine_with_history" in pg:
        aged = pg["engine_with_history"]
        ratios[f"engine with {results['history']:,} done / empty"] = (
            aged["purchases_per_s"] / engine["purchases_per_s"]
        )
        print(
            f"saga stats: {engine['stats_s']:.2f} s empty, "
            f"{aged['stats_s']:.2f} s with {results['history']:,} finished purchases"
        )
    for name, value in ratios.items():
        print(f"{name:<48}{value:>6.2f}")


def _replay_ratio(name: str, results: dict[str, Any]) -> float:
    again = results["replay"]
    print(
        f"{name}: replay of the engine's own statements without it: "
        f"{again['purchases_per_s']:.1f} purchases/s ({again['transactions']:.0f} transactions, "
        f"{again['statements']:.0f} statements on {again['connections']:.0f} connections, "
        f"{again['failed']:.0f} failed)"
    )
    return float(results["engine"]["purchases_per_s"] / again["purchases_per_s"])


if __name__ == "__main__":
    main()
