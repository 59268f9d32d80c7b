"""
Queue benchmark: 20,000 no-op jobs through the engine, procrastinate and
pgqueuer with 1 and 2 worker processes, the raw-SQL floor (pgbench running
the engine's claim and completion statements) at the same number of
connections, and the claim latency with 10k and 1M finished jobs.

Every figure comes from this run, on this machine; ratios are taken between
figures of the same run.  Each configuration runs ``--runs`` times on a fresh
database; the median is reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
import systems

HERE = Path(__file__).resolve().parent
DATABASE = "saga_queue_bench"
DROP_DATABASE = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=50, help="the engine's batch (its default)")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    systems.quiet()
    bench = Bench(args)
    results: dict[str, Any] = {"machine": machine(), "jobs": args.jobs, "runs": args.runs}
    results["throughput"] = bench.throughput()
    if not args.skip_latency:
        results["claim_latency"] = bench.latency()
    report(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.admin = args.admin_url
        base = args.admin_url.rsplit("/", 1)[0]
        self.dsn = f"{base}/{DATABASE}"
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["systems", "saga"])

    # -- databases ------------------------------------------------------------------

    def fresh_database(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(DROP_DATABASE)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))

    def drop_database(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(DROP_DATABASE)

    def checkpoint(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")

    # -- throughput -----------------------------------------------------------------

    def configurations(self) -> list[systems.System]:
        return [
            systems.System(f"saga (batch {self.args.batch})", "saga", {"batch": self.args.batch}),
            systems.System("procrastinate (defaults)", "procrastinate"),
            systems.System("pgqueuer (defaults: batch 10)", "pgqueuer"),
            systems.System("pgqueuer (batch 50)", "pgqueuer", {"batch_size": 50}),
        ]

    def throughput(self) -> list[dict[str, Any]]:
        rows = []
        for workers in self.args.workers:
            for system in self.configurations():
                rows.append(self.measure(system, workers))
            rows.append(self.floor(workers))
        self.drop_database()
        return rows

    def measure(self, system: systems.System, workers: int) -> dict[str, Any]:
        enqueue_rates, work_rates = [], []
        for run in range(self.args.runs):
            self.fresh_database()
            systems.SETUP[system.kind](self.dsn)
            start = time.perf_counter()
            systems.ENQUEUE[system.kind](self.dsn, self.args.jobs)
            enqueue_rates.append(self.args.jobs / (time.perf_counter() - start))
            self.checkpoint()
            # Every worker and this process meet at the gate: the clock starts
            # when the last worker is connected and ready, all released at once.
            gate = self.ctx.Barrier(workers + 1)
            processes = [
                self.ctx.Process(
                    target=systems.run_worker, args=(system.kind, self.dsn, gate, system.options)
                )
                for _ in range(workers)
            ]
            for process in processes:
                process.start()
            gate.wait(timeout=300)
            start = time.perf_counter()
            # The clock stops when the last job is recorded done, not when the
            # workers notice the queue is empty: systems differ a lot in how
            # long that takes, and it is not throughput.
            done = self.wait_done(system, processes)
            elapsed = time.perf_counter() - start
            for process in processes:
                process.join()
            if done != self.args.jobs:
                msg = f"{system.name}: {done} of {self.args.jobs} jobs done"
                raise RuntimeError(msg)
            work_rates.append(self.args.jobs / elapsed)
            print(
                f"  {system.name}, {workers} worker(s), run {run + 1}: "
                f"{work_rates[-1]:,.0f} jobs/s",
                file=sys.stderr,
            )
        return {
            "system": system.name,
            "kind": system.kind,
            "workers": workers,
            "jobs_per_s": statistics.median(work_rates),
            "runs": [round(rate) for rate in work_rates],
            "enqueue_per_s": statistics.median(enqueue_rates),
        }

    def wait_done(self, system: systems.System, processes: list[Any]) -> int:
        with psycopg.connect(
            self.dsn.replace("postgresql+psycopg", "postgresql"), autocommit=True
        ) as conn:
            while True:
                done = systems.done(system.kind, conn, self.args.jobs)
                if done >= self.args.jobs or not any(p.is_alive() for p in processes):
                    return systems.done(system.kind, conn, self.args.jobs)
                time.sleep(0.02)

    def floor(self, workers: int) -> dict[str, Any]:
        rates = []
        batch = self.args.batch
        rounds = -(-self.args.jobs // (batch * workers)) + 1
        for run in range(self.args.runs):
            self.fresh_database()
            systems.saga_setup(self.dsn)
            systems.saga_enqueue(self.dsn, self.args.jobs)
            self.checkpoint()
            command = [
                "pgbench",
                "--no-vacuum",
                "--protocol=prepared",
                f"--client={workers}",
                f"--jobs={workers}",
                f"--transactions={rounds}",
                f"--define=batch={batch}",
                f"--file={HERE / 'floor.sql'}",
                self.dsn,
            ]
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            done = systems.saga_done(self.dsn)
            if done != self.args.jobs:
                msg = f"floor: {done} of {self.args.jobs} jobs done"
                raise RuntimeError(msg)
            rates.append(self.args.jobs / elapsed)
            print(
                f"  raw-SQL floor, {workers} connection(s), run {run + 1}: {rates[-1]:,.0f} jobs/s",
                file=sys.stderr,
            )
        return {
            "system": f"raw-SQL floor (pgbench, batch {batch})",
            "kind": "floor",
            "workers": workers,
            "jobs_per_s": statistics.median(rates),
            "runs": [round(rate) for rate in rates],
        }

    # -- claim latency ----------------------------------------------------------------

    def latency(self) -> list[dict[str, Any]]:
        rows = []
        for finished in (10_000, 1_000_000):
            self.fresh_database()
            systems.saga_setup(self.dsn)
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO job_archive (id, queue, kind, digest, state, attempts, "
                    "created_at, finished_at) SELECT 'old-' || n, 'bench', 'noop', 'd', 'done', 1, "
                    "now(), now() FROM generate_series(1, %s) AS n",
                    (finished,),
                )
                conn.execute(
                    "INSERT INTO jobs (id, queue, kind, digest) SELECT 'new-' || n, 'bench', "
                    "'noop', 'd' FROM generate_series(1, 5000) AS n"
                )
            self.checkpoint()
            rows.append({"finished_jobs": finished, **self.claim_latencies(2_000)})
            print(
                f"  claim latency with {finished:,} finished jobs: "
                f"p50 {rows[-1]['p50_ms']:.3f} ms, p99 {rows[-1]['p99_ms']:.3f} ms",
                file=sys.stderr,
            )
        self.drop_database()
        return rows

    def claim_latencies(self, samples: int) -> dict[str, Any]:
        from saga import Engine
        from saga.core.queue.leases import Queue
        from saga.core.queue.values import Done

        with Engine(self.dsn) as engine:
            queue = Queue(engine.db)
            timings = []
            for _ in range(samples):
                start = time.perf_counter()
                jobs = queue.claim(["noop"], batch=1)
                timings.append((time.perf_counter() - start) * 1000)
                queue.complete([Done(job) for job in jobs])
            with psycopg.connect(self.dsn) as conn:
                size = conn.execute(
                    "SELECT pg_total_relation_size('jobs'), pg_total_relation_size('job_archive')"
                ).fetchone()
        timings.sort()
        return {
            "p50_ms": statistics.median(timings),
            "p99_ms": timings[int(len(timings) * 0.99) - 1],
            "jobs_table_bytes": size[0],
            "archive_bytes": size[1],
        }


def machine() -> dict[str, Any]:
    cpus = Path("/proc/cpuinfo").read_text().count("\nprocessor") + 1
    version = (
        subprocess.run(
            ["pg_config", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        or "unknown"
    )
    return {
        "python": platform.python_version(),
        "cpus": cpus,
        "postgres": version,
        "platform": platform.platform(),
    }


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    rows = results["throughput"]
    print(
        f"\nQueue benchmark: {results['jobs']:,} no-op jobs, median of {results['runs']} runs "
        f"({results['machine']['cpus']} CPUs, {results['machine']['postgres']})\n"
    )
    print(f"{'system':<40} {'workers':>7} {'jobs/s':>10} {'runs':>24} {'enqueue/s':>10}")
    for row in rows:
        runs = "/".join(f"{r:,}" for r in row["runs"])
        enqueue = f"{row['enqueue_per_s']:,.0f}" if "enqueue_per_s" in row else "-"
        print(
            f"{row['system']:<40} {row['workers']:>7} {row['jobs_per_s']:>10,.0f} "
            f"{runs:>24} {enqueue:>10}"
        )
    print("\nRatios (same run):")
    for workers in args.workers:
        at = {row["system"]: row["jobs_per_s"] for row in rows if row["workers"] == workers}
        ours = next(v for k, v in at.items() if k.startswith("saga"))
        default_peers = max(at["procrastinate (defaults)"], at["pgqueuer (defaults: batch 10)"])
        best_peer = max(v for k, v in at.items() if not k.startswith(("saga", "raw")))
        floor = next(v for k, v in at.items() if k.startswith("raw"))
        print(
            f"  {workers} worker(s): saga / faster peer at defaults = "
            f"{ours / default_peers:.2f}x (target >= 1.5); "
            f"saga / best peer config = {ours / best_peer:.2f}x; "
            f"saga / raw-SQL floor = {ours / floor:.2f} (target >= 0.5)"
        )
    if "claim_latency" in results:
        low, high = results["claim_latency"]
        print("\nClaim latency (claim 1 job, database clock lease, Python round trip):")
        for row in (low, high):
            print(
                f"  {row['finished_jobs']:>9,} finished jobs: p50 {row['p50_ms']:.3f} ms, "
                f"p99 {row['p99_ms']:.3f} ms; jobs table {row['jobs_table_bytes']:,} B, "
                f"archive {row['archive_bytes']:,} B"
            )
        print(f"  p50 ratio 1M / 10k = {high['p50_ms'] / low['p50_ms']:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
