"""
The command line keeps DESIGN.md §4: exit codes, what a read may touch, messages.

Each test is one contract defect of issue 7, on SQLite and on PostgreSQL
where the backend matters.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import psycopg
import pytest
from psycopg import sql

from saga import Engine
from saga.cli import main
from tests import schemas
from tests.conftest import POSTGRES_URL, require_postgres
from tests.helpers import scalar
from tests.purchases import settle

READS = (
    ("stats",),
    ("verify",),
    ("purchase", "list"),
    ("recon", "list"),
    ("intensive", "list"),
    ("dlq", "list"),
    ("sandbox", "ledger"),
    ("worker", "--burst"),
)


def run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def shop(engine, db_url):
    engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
    return engine


@pytest.mark.parametrize("argv", READS, ids=[" ".join(a) for a in READS])
def test_a_read_on_a_missing_sqlite_file_exits_4_and_creates_nothing(tmp_path, capsys, argv):
    """A mistyped path is "not found", named; no empty database appears to look healthy."""
    path = tmp_path / "typo.db"
    code, out, err = run(capsys, *argv, "--db", f"sqlite:///{path}")
    assert (4, "") == (code, out)
    assert str(path) in err
    assert not path.exists()
    assert not (tmp_path / "typo.sandbox.db").exists()


def test_a_missing_sandbox_file_is_named(sqlite_url, capsys):
    """saga.db without its sandbox file: the ledger is not found, verify names why."""
    with Engine(sqlite_url, check_schema=False) as engine:
        schemas.migrate(engine)
    code, _, err = run(capsys, "sandbox", "ledger", "--db", sqlite_url)
    assert 4 == code
    assert "saga.sandbox.db" in err
    code, out, _ = run(capsys, "verify", "--db", sqlite_url, "--json")
    failing = [i for i in json.loads(out)["invariants"] if i["violations"]]
    assert (1, ["provider_reachable"]) == (code, [i["name"] for i in failing])
    assert "saga.sandbox.db" in failing[0]["examples"][0]


def test_a_bad_sandbox_url_is_reported_as_sandbox_db(shop, db_url, capsys):
    """The message names the option that was wrong."""
    code, _, err = run(capsys, "sandbox", "ledger", "--db", db_url, "--sandbox-db", "mysql://x")
    assert 2 == code
    assert "--sandbox-db:" in err


def test_purchase_of_an_unknown_intensive_exits_4(shop, db_url, capsys):
    """An unknown intensive is "not found" (exit 4), and nothing is accepted."""
    code, _, err = run(
        capsys,
        "purchase",
        "start",
        "--operation-id",
        "op-1",
        "--intensive",
        "nope",
        "--student",
        "s1",
        "--db",
        db_url,
    )
    assert 4 == code
    assert "intensive 'nope' not found" in err
    assert 0 == scalar(shop, "SELECT count(*) FROM sagas")


@pytest.mark.slow
def test_a_duplicate_webhook_says_where_the_purchase_is(shop, db_url, capsys):
    """--json of a duplicate has the purchase's state; the text has no "(None)"."""
    purchase = shop.services.purchases.start(
        operation_id="op-1", intensive_id="js", student_id="s1", hold_seconds=600
    ).purchase
    settle(db_url)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    argv = (
        "webhook",
        "deliver",
        "--event-id",
        "evt-dup",
        "--type",
        "payment.succeeded",
        "--payment",
        payment_id,
        "--amount",
        "49.00",
        "--currency",
        "EUR",
        "--db",
        db_url,
    )
    run(capsys, *argv)
    code, out, _ = run(capsys, *argv, "--json")
    assert (0, True, "confirmed") == (code, json.loads(out)["duplicate"], json.loads(out)["state"])
    _, text, _ = run(capsys, *argv)
    assert "None" not in text
    assert "(confirmed)" in text


@pytest.mark.slow
def test_purchase_show_has_payment_refund_and_item_lines(shop, db_url, capsys):
    """The text view shows the money, not only the JSON."""
    purchase = shop.services.purchases.start(
        operation_id="op-1", intensive_id="js", student_id="s1", hold_seconds=600
    ).purchase
    settle(db_url)
    shop.services.purchases.cancel(purchase.id, reason="changed plans")
    settle(db_url)
    code, out, _ = run(capsys, "purchase", "show", purchase.id, "--db", db_url)
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()}
    assert 0 == code
    assert "succeeded, charged 49.00" in lines["payment"]
    assert "succeeded, 49.00" in lines["refund"]
    assert "reconciliation" in lines


@pytest.mark.slow
def test_a_second_resolution_says_already_resolved(shop, db_url, capsys):
    """Not "is resolved at version 2, not 2": the message says what happened."""
    purchase = shop.services.purchases.start(
        operation_id="op-1",
        intensive_id="js",
        student_id="s1",
        payment_method="pm_timeout_after_charge",
        hold_seconds=600,
    ).purchase
    del purchase
    settle(db_url)
    item = shop.recon.find(status=None)[0]
    code, _, err = run(
        capsys,
        "recon",
        "resolve",
        item.id,
        "--outcome",
        "paid",
        "--operator",
        "ann",
        "--reason",
        "again",
        "--db",
        db_url,
    )
    assert 3 == code
    assert f"reconciliation item {item.id} is already resolved (version 2)" in err


def test_purchase_list_says_when_it_stops_at_the_limit(shop, db_url, capsys):
    """A listing cut at --limit says so on stderr; stdout stays the list."""
    for n in range(3):
        shop.services.purchases.start(
            operation_id=f"op-{n}", intensive_id="js", student_id=f"s{n}", hold_seconds=600
        )
    code, out, err = run(capsys, "purchase", "list", "--limit", "2", "--json", "--db", db_url)
    assert (0, 2) == (code, len(json.loads(out)))
    assert "showing the newest 2 purchases only" in err
    _, _, err = run(capsys, "purchase", "list", "--limit", "3", "--db", db_url)
    assert "" == err


def test_replay_all_needs_yes_when_not_interactive(shop, db_url, capsys, monkeypatch):
    """dlq replay --all off a terminal without --yes: exit 2, nothing replayed."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal
    shop.db.transaction(
        lambda tx: tx.execute_sql(
            "INSERT INTO jobs (id, queue, kind, digest, state, attempts, max_attempts, "
            "last_error, error_class, finished_at) VALUES ('dead', 'q', 'k', 'd', 'failed', 1, 1, "
            "'boom', 'permanent', '2026-01-01T00:00:00.000Z')"
        )
    )
    code, _, err = run(capsys, "dlq", "replay", "--all", "--db", db_url)
    assert 2 == code
    assert "--yes" in err
    assert "failed" == scalar(shop, "SELECT state FROM jobs WHERE id = 'dead'")
    assert 0 == run(capsys, "dlq", "replay", "--all", "--yes", "--db", db_url)[0]
    assert "pending" == scalar(shop, "SELECT state FROM jobs WHERE id = 'dead'")


@pytest.mark.postgres
def test_db_upgrade_creates_a_missing_postgres_schema(capsys):
    """A search_path naming a schema that does not exist yet: db upgrade creates it."""
    require_postgres()
    name = "t_missing_schema_for_upgrade"
    libpq = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1)
    separator = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{name}"
    try:
        code, _, err = run(capsys, "db", "upgrade", "--db", url)
        assert 0 == code, err
        with Engine(url) as engine:
            assert 0 == scalar(engine, "SELECT count(*) FROM sagas")
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.slow
def test_a_crash_looping_worker_gives_up_with_one_traceback(sqlite_url, capsys, monkeypatch):
    """Workers that die as they start: backoff, then exit 1 with the traceback printed once."""
    with Engine(sqlite_url, check_schema=False) as setup:
        schemas.migrate(setup)
    monkeypatch.setenv("SAGA_TEST_SUPERVISOR_PID", str(os.getpid()))
    code, _, err = run(
        capsys, "worker", "--app", "tests.crashing_app:crash_looping", "--db", sqlite_url
    )
    assert 1 == code
    assert 1 == err.count("RuntimeError: boom: this worker cannot start")
    assert 1 == err.count("Traceback (most recent call last)")
    assert "giving up" in err


@pytest.mark.slow
def test_a_client_killed_after_the_commit_gets_its_purchase_by_retrying(tmp_path):
    """Crash after commit, before the reply: the same command again returns that purchase."""
    url = f"sqlite:///{tmp_path}/saga.db"
    base = [sys.executable, "-m", "saga", "--db", url]
    subprocess.run(
        [*base, "intensive", "add", "js", "--seats", "2", "--price", "9.00", "--currency", "EUR"],
        check=True,
        capture_output=True,
    )
    start = [
        *base,
        "purchase",
        "start",
        "--operation-id",
        "op-1",
        "--intensive",
        "js",
        "--student",
        "ann",
        "--json",
    ]
    env = {
        **os.environ,
        "SAGA_CRASH_POINTS": "accept.after_commit",
        "SAGA_CRASH_MARKER": str(tmp_path / "crash"),
    }
    crashed = subprocess.run(start, env=env, capture_output=True, text=True, check=False)
    assert (137, "") == (crashed.returncode, crashed.stdout)
    again = subprocess.run(start, capture_output=True, text=True, check=False)
    assert 0 == again.returncode, again.stderr
    purchase = json.loads(again.stdout)
    listed = subprocess.run(
        [*base, "purchase", "list", "--json"], capture_output=True, text=True, check=True
    )
    payload = json.loads(listed.stdout)
    purchases = payload["purchases"] if isinstance(payload, dict) else payload
    assert [purchase["id"]] == [p["id"] for p in purchases]
    seats = subprocess.run(
        [*base, "intensive", "show", "js", "--json"], capture_output=True, text=True, check=True
    )
    assert 1 == json.loads(seats.stdout)["seats"]["held"]
