"""The saga CLI: the contract of DESIGN.md §4 (commands, --json fields, exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga import Engine
from saga.cli import main
from saga.core.queue.leases import Queue
from saga.queue import NewJob
from tests import schemas
from tests.helpers import dump

PURCHASE_FIELDS = {
    "id",
    "operation_id",
    "intensive_id",
    "student_id",
    "state",
    "version",
    "payment",
    "refund",
    "reconciliation",
    "history",
}
HISTORY_FIELDS = {"from", "to", "event", "actor", "at"}


class Cli:
    """Runs `saga` in-process against one database."""

    def __init__(self, url, capsys):
        self.url = url
        self.capsys = capsys

    def __call__(self, *argv):
        code = main([*argv, "--db", self.url])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *argv):
        code, out, err = self(*argv, "--json")
        assert 0 == code, err
        return json.loads(out)


@pytest.fixture
def cli(db_url, capsys):
    with Engine(db_url, check_schema=False) as engine:
        schemas.migrate(engine)
    capsys.readouterr()  # the library logs with structlog's defaults until the CLI configures it
    return Cli(db_url, capsys)


@pytest.fixture
def stocked(cli):
    assert (
        0
        == cli(
            "intensive", "add", "js-101", "--seats", "2", "--price", "49.90", "--currency", "EUR"
        )[0]
    )
    return cli


def database(cli):
    with Engine(cli.url) as engine:
        return dump(engine)


def start(cli, op="op-1", student="s1", *extra):
    return cli(
        "purchase",
        "start",
        "--operation-id",
        op,
        "--intensive",
        "js-101",
        "--student",
        student,
        *extra,
    )


class TestIntensive:
    def test_add_prints_the_contract_shape(self, cli):
        """intensive add --json gives id, capacity, price, currency and seats."""
        out = cli.json(
            "intensive", "add", "js-101", "--seats", "30", "--price", "49.90", "--currency", "EUR"
        )
        assert {
            "id": "js-101",
            "capacity": 30,
            "price": "49.90",
            "currency": "EUR",
            "seats": {"held": 0, "taken": 0, "free": 30},
        }.items() <= out.items()

    def test_show_and_list(self, stocked):
        """show gives one intensive, list gives a list of them."""
        assert "js-101" == stocked.json("intensive", "show", "js-101")["id"]
        assert ["js-101"] == [i["id"] for i in stocked.json("intensive", "list")]

    def test_show_unknown_is_not_found(self, stocked):
        """An unknown id exits 4 with the id in the message on stderr."""
        code, out, err = stocked("intensive", "show", "nope")
        assert (4, "") == (code, out)
        assert "nope" in err

    def test_conflicting_add_exits_3(self, stocked):
        """Another capacity under an existing id is a conflict."""
        assert (
            3
            == stocked(
                "intensive",
                "add",
                "js-101",
                "--seats",
                "3",
                "--price",
                "49.90",
                "--currency",
                "EUR",
            )[0]
        )


class TestPurchase:
    def test_start_prints_the_contract_shape(self, stocked):
        """purchase start --json gives every field of the contract."""
        out = stocked.json(
            "purchase",
            "start",
            "--operation-id",
            "op-1",
            "--intensive",
            "js-101",
            "--student",
            "s1",
        )
        assert PURCHASE_FIELDS <= set(out)
        assert ("reserved", "op-1", 1) == (out["state"], out["operation_id"], out["version"])
        assert HISTORY_FIELDS <= set(out["history"][0])

    def test_same_operation_same_payload_exits_0_with_the_same_json(self, stocked):
        """Repeating a request returns the same purchase, byte for byte."""
        first = start(stocked, "op-1", "s1", "--json")
        second = start(stocked, "op-1", "s1", "--json")
        assert (0, 0) == (first[0], second[0])
        assert first[1] == second[1]

    def test_same_operation_other_payload_exits_3_naming_the_id(self, stocked):
        """Reusing an operation id for another student is a conflict that changes nothing."""
        start(stocked)
        before = database(stocked)
        code, out, err = start(stocked, "op-1", "s2")
        assert (3, "") == (code, out)
        assert "op-1" in err
        assert before == database(stocked)

    def test_sold_out_exits_3_and_changes_nothing(self, stocked):
        """No free seat: a clear error, exit 3, nothing written."""
        start(stocked, "op-1", "s1")
        start(stocked, "op-2", "s2")
        before = database(stocked)
        code, _, err = start(stocked, "op-3", "s3")
        assert 3 == code
        assert "sold out" in err
        assert before == database(stocked)

    def test_show_has_history_and_list_filters_by_state(self, stocked):
        """show gives the history; list --state filters."""
        created = json.loads(start(stocked, "op-1", "s1", "--json")[1])
        shown = stocked.json("purchase", "show", created["id"])
        assert ["start"] == [h["event"] for h in shown["history"]]
        assert [created["id"]] == [
            p["id"] for p in stocked.json("purchase", "list", "--state", "reserved")
        ]
        assert [] == stocked.json("purchase", "list", "--state", "confirmed")

    def test_show_unknown_is_not_found(self, stocked):
        """An unknown purchase id exits 4."""
        assert 4 == stocked("purchase", "show", "nope")[0]

    def test_cancel_needs_a_reason_and_frees_the_seat(self, stocked):
        """cancel moves a reserved purchase to cancelled and frees its seat."""
        created = json.loads(start(stocked, "op-1", "s1", "--json")[1])
        out = stocked.json("purchase", "cancel", created["id"], "--reason", "changed plans")
        assert "cancelled" == out["state"]
        assert 2 == stocked.json("intensive", "show", "js-101")["seats"]["free"]
        assert 3 == stocked("purchase", "cancel", created["id"], "--reason", "again")[0]


REJECTED = [
    (("intensive", "add", "x", "--seats", "3", "--price", "10", "--currency", "ZZZ"), "--currency"),
    (
        ("intensive", "add", "x", "--seats", "3", "--price", " 49.90", "--currency", "EUR"),
        "--price",
    ),
    (("intensive", "add", "x", "--seats", "3", "--price", "10.5", "--currency", "JPY"), "--price"),
    (("purchase", "list", "--limit", "0"), "--limit"),
    (("dlq", "replay", "--all", "--batch", "0"), "--batch"),
    (("worker", "--burst", "--queue", "nope"), "--queue"),
    (("worker", "--burst", "--concurrency", "100000"), "--concurrency"),
    (("intensive", "add", "x", "--seats", "-3", "--price", "10", "--currency", "EUR"), "--seats"),
    (("intensive", "add", "x", "--seats", "3", "--price", "ten", "--currency", "EUR"), "--price"),
    (("intensive", "add", "x", "--seats", "3", "--price", "1.001", "--currency", "EUR"), "--price"),
    (
        ("intensive", "add", "x", "--seats", "3", "--price", "10", "--currency", "euros"),
        "--currency",
    ),
    (
        ("purchase", "start", "--operation-id", "", "--intensive", "js-101", "--student", "s"),
        "--operation-id",
    ),
    (
        (
            "purchase",
            "start",
            "--operation-id",
            "o" * 129,
            "--intensive",
            "js-101",
            "--student",
            "s",
        ),
        "--operation-id",
    ),
    (
        (
            "purchase",
            "start",
            "--operation-id",
            "op",
            "--intensive",
            "js-101",
            "--student",
            "s",
            "--hold-seconds",
            "0",
        ),
        "--hold-seconds",
    ),
    (
        (
            "purchase",
            "start",
            "--operation-id",
            "op",
            "--intensive",
            "js-101",
            "--student",
            "s",
            "--payment-method",
            "pm_nope",
        ),
        "--payment-method",
    ),
    (("purchase", "list", "--state", "paid"), "--state"),
    (("intensive", "add", "x", "--seats", "many", "--price", "10", "--currency", "EUR"), "--seats"),
    (("diagram", "--kind", "nope"), "--kind"),
    (("intensive", "add", "js2\n", "--seats", "3", "--price", "10", "--currency", "EUR"), "ID"),
    (("intensive", "add", "x", "--seats", "3_0", "--price", "10", "--currency", "EUR"), "--seats"),
    (
        ("intensive", "add", "x", "--seats", "\u0663", "--price", "10", "--currency", "EUR"),
        "--seats",
    ),
    (
        ("intensive", "add", "x", "--seats", "3", "--price", "\u0664\u0669", "--currency", "EUR"),
        "--price",
    ),
    (
        ("intensive", "add", "x", "--seats", "3", "--price", "10", "--currency", "EUR\n"),
        "--currency",
    ),
    (
        ("purchase", "start", "--operation-id", "op", "--intensive", "js-101", "--student", "s1\n"),
        "--student",
    ),
    (("purchase", "show", "a\x00b"), "ID"),
    (("purchase", "cancel", "a\x00b", "--reason", "r"), "ID"),
]


@pytest.mark.parametrize(("argv", "field"), REJECTED, ids=[f for _, f in REJECTED])
def test_rejected_commands_exit_2_name_the_field_and_change_nothing(stocked, argv, field):
    """Bad input: exit 2, the field named on stderr, nothing on stdout, database unchanged."""
    before = database(stocked)
    code, out, err = stocked(*argv)
    assert (2, "") == (code, out)
    assert field in err
    assert before == database(stocked)


def test_help_exits_0(capsys):
    """--help prints usage on stdout and exits 0."""
    assert 0 == main(["--help"])
    assert "usage: saga" in capsys.readouterr().out


def test_diagram_shows_every_state_and_transition(capsys):
    """saga diagram prints Mermaid with every state of the purchase saga."""
    assert 0 == main(["diagram"])
    text = capsys.readouterr().out
    assert text.startswith("---")
    assert "stateDiagram-v2" in text
    for state in (
        "reserved",
        "payment_pending",
        "confirmed",
        "expired",
        "cancelled",
        "refund_pending",
        "refunded",
        "needs_reconciliation",
    ):
        assert f"state {state}" in text


def test_options_work_before_and_after_the_command(stocked, capsys):
    """--db and --json are accepted before the subcommand too."""
    code = main(["--db", stocked.url, "--json", "intensive", "show", "js-101"])
    assert 0 == code
    assert "js-101" == json.loads(capsys.readouterr().out)["id"]


def test_console_script_uses_saga_db_in_the_working_directory(tmp_path):
    """Without --db or SAGA_DATABASE_URL, `saga` creates saga.db where it runs."""
    env = {k: v for k, v in os.environ.items() if k != "SAGA_DATABASE_URL"}
    command = [
        sys.executable,
        "-m",
        "saga",
        "intensive",
        "add",
        "js",
        "--seats",
        "1",
        "--price",
        "1",
        "--currency",
        "EUR",
        "--json",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert 0 == done.returncode, done.stderr
    assert "js" == json.loads(done.stdout)["id"]
    assert (tmp_path / "saga.db").exists()


def test_database_url_from_the_environment(tmp_path):
    """SAGA_DATABASE_URL picks the database when --db is not given."""
    url = f"sqlite:///{tmp_path}/env.db"
    env = {**os.environ, "SAGA_DATABASE_URL": url}
    upgrade = [sys.executable, "-m", "saga", "db", "upgrade"]
    subprocess.run(upgrade, cwd=tmp_path, env=env, capture_output=True, check=True)
    command = [sys.executable, "-m", "saga", "intensive", "list", "--json"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert (0, "[]") == (done.returncode, done.stdout.strip())
    assert Path(tmp_path / "env.db").exists()
    assert not (tmp_path / "saga.db").exists()


def test_rejected_command_does_not_create_the_database(tmp_path, capsys):
    """Bad input is refused before anything touches the database: no file appears."""
    url = f"sqlite:///{tmp_path}/fresh.db"
    code = main(
        ["intensive", "add", "x", "--seats", "-3", "--price", "1", "--currency", "EUR", "--db", url]
    )
    assert 2 == code
    assert not (tmp_path / "fresh.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "sqlite://",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///x.db?mode=ro",
        "postgresql://postgres@[::1",
        "mysql://root@localhost/db",
        "not a url",
    ],
)
def test_bad_database_urls_exit_2_naming_db(url, capsys, tmp_path, monkeypatch):
    """A database URL that cannot work is bad input on --db, not a crash or a silent no-op."""
    monkeypatch.chdir(tmp_path)
    code = main(["intensive", "list", "--db", url])
    err = capsys.readouterr().err
    assert 2 == code
    assert "--db" in err
    assert not (tmp_path / "saga.db").exists()


def test_unreachable_database_exits_1_with_a_message(capsys):
    """A database that cannot be reached is reported on stderr, exit 1, no traceback."""
    code = main(["intensive", "list", "--db", "postgresql://nobody@127.0.0.1:1/none"])
    err = capsys.readouterr().err
    assert 1 == code
    assert err.startswith("saga: error:")
    assert "Traceback" not in err


def test_dlq_list_json_names_reason_and_failure_time(cli):
    """`saga dlq list --json`: one object per dead letter, with its reason and failure time."""
    with Engine(cli.url) as engine:
        queue = Queue(engine.db)
        queue.enqueue(NewJob(id="d1", queue="q", kind="noop", saga_id=None))
        (job,) = queue.claim(["noop"], batch=1)
        queue.fail(job, error="boom", error_class="permanent")
    (letter,) = cli.json("dlq", "list")
    assert {
        "id": "d1",
        "queue": "q",
        "kind": "noop",
        "saga_id": None,
        "attempts": 1,
        "max_attempts": letter["max_attempts"],
        "reason": "permanent",
        "last_error": "boom",
        "created_at": letter["created_at"],
        "failed_at": letter["failed_at"],
    } == letter
    assert letter["created_at"] <= letter["failed_at"]
