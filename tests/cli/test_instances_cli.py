"""
`saga instances start|list|show|cancel` on users' kinds, on SQLite and PostgreSQL.

`instances start KIND` is idempotent like `purchase start` (same id and
request: the same saga, exit 0; another request: exit 3, nothing changed;
bad JSON or a request the kind refuses: exit 2, nothing stored); the
purchase is started its own way (its price is the catalogue's, never the
caller's).  The kit's replay line runs as printed.  `list --state` refuses a
state no kind declares, naming the known ones; `cancel` on a kind without a
`cancel` event says so (exit 2); `list` and `show` give the definition version.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from saga.cli import main
from saga.examples.approvals import app as approval_app
from saga.examples.enrollment import app as enrollment_app
from saga.testing import application_of
from state_machine import Machine, State, Timeout, Transition
from tests.helpers import count_rows, dump, engine_on

APPROVALS = "saga.examples.approvals:app"
ENROLLMENTS = "saga.examples.enrollment:app"
DOCS = Path(__file__).resolve().parents[2] / "docs"

# The kind the kit's replay example in docs/testing.md starts.
REMINDER_APP = application_of(
    Machine(
        "reminder",
        states=[
            State("waiting", initial=True, timeout=Timeout("nudge", seconds=30)),
            State("done", terminal=True),
        ],
        transitions=[
            Transition("nudge", source="waiting", target="done"),
            Transition("finish", source="waiting", target="done"),
        ],
    ),
    None,
)


class Cli:
    """`saga …` in-process against one database and application: (exit code, stdout, stderr)."""

    def __init__(self, url, app, capsys):
        self.url, self.app, self.capsys = url, app, capsys

    def __call__(self, *argv):
        self.capsys.readouterr()
        code = main([*argv, "--db", self.url, *(("--app", self.app) if self.app else ())])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *argv):
        code, out, err = self(*argv, "--json")
        return code, (json.loads(out) if out.strip() else None), err


@pytest.fixture
def approvals(db_url, capsys):
    with engine_on(db_url, approval_app) as engine:
        yield engine, Cli(db_url, APPROVALS, capsys)


def start(cli, operation_id, request, *extra):
    return cli.json(
        "instances",
        "start",
        "approval",
        "--operation-id",
        operation_id,
        *extra,
        "--request",
        request,
    )


class TestStart:
    def test_same_id_and_request_is_the_same_saga(self, approvals):
        """Accepted, then found again: exit 0 both times, one saga, 'already accepted'."""
        engine, cli = approvals
        code, first, _ = start(cli, "doc-1", '{"doc": "a"}')
        assert (0, True, "doc-1") == (code, first["created"], first["operation_id"])
        assert ("approval", "submitted", 1, {"doc": "a"}) == (
            first["kind"],
            first["state"],
            first["definition_version"],
            first["data"],
        )
        code, again, _ = start(cli, "doc-1", '{"doc": "a"}')
        assert (0, first["id"], False) == (code, again["id"], again["created"])
        code, out, _ = cli(
            "instances", "start", "approval", "--operation-id", "doc-1", "--request", '{"doc": "a"}'
        )
        assert 0 == code
        assert out.startswith(
            f"already accepted: approval {first['id']} (submitted, version 1, definition v1)"
        )
        assert 1 == count_rows(engine, "sagas")

    def test_its_json_has_the_fields_of_instances_show(self, approvals):
        """The same names as `instances show`, plus operation_id and created."""
        _, cli = approvals
        _, started, _ = start(cli, "doc-1", "{}")
        code, shown, _ = cli.json("instances", "show", started["id"])
        assert 0 == code
        assert set(shown) | {"operation_id", "created"} == set(started)
        assert ["start"] == [h["event"] for h in started["history"]]
        assert [f"step:{started['id']}:1:notify_reviewer"] == [j["id"] for j in started["jobs"]]

    def test_another_request_under_the_id_exits_3_and_changes_nothing(self, approvals):
        """The idempotency key reused with other content: a conflict naming the saga."""
        engine, cli = approvals
        _, first, _ = start(cli, "doc-1", '{"doc": "a"}')
        before = dump(engine)
        code, out, err = start(cli, "doc-1", '{"doc": "b"}')
        assert (3, None) == (code, out)
        assert "already used with another payload" in err
        assert first["id"] in err
        assert before == dump(engine)

    @pytest.mark.parametrize(
        ("kind", "request_text", "named"),
        [
            ("approval", '{"doc": ', "--request: not JSON"),
            ("approval", "[1]", "--request: must be a JSON object"),
            ("nope", "{}", "KIND: must be one of approval"),
        ],
    )
    def test_bad_input_exits_2_and_stores_nothing(self, approvals, kind, request_text, named):
        """Bad JSON, a request that is no object, an unknown kind: exit 2 naming it."""
        engine, cli = approvals
        before = dump(engine)
        code, out, err = cli.json(
            "instances", "start", kind, "--operation-id", "op-1", "--request", request_text
        )
        assert (2, None) == (code, out)
        assert named in err
        assert before == dump(engine)

    def test_a_request_the_kind_refuses_exits_2(self, db_url, capsys):
        """An enrollment's signing deadline comes from its request: without it, refused."""
        with engine_on(db_url, enrollment_app) as engine:
            cli = Cli(db_url, ENROLLMENTS, capsys)
            args = ("instances", "start", "enrollment", "--operation-id", "e-1", "--request")
            code, _, err = cli.json(*args, '{"student": "lena"}')
            assert 2 == code
            assert "sign_seconds" in err
            assert (0, 0) == (count_rows(engine, "sagas"), count_rows(engine, "saga_operations"))
            code, started, _ = cli.json(*args, '{"student": "lena", "sign_seconds": 600}')
            assert (0, "requested") == (code, started["state"])

    def test_the_kits_replay_line_runs_as_printed(self, db_url, capsys):
        """docs/testing.md's replay line, run as written (with the application and database)."""
        [line] = re.findall(r"^saga instances start .*$", (DOCS / "testing.md").read_text(), re.M)
        argv = shlex.split(line)[1:]
        with engine_on(db_url, REMINDER_APP):
            cli = Cli(db_url, "tests.cli.test_instances_cli:REMINDER_APP", capsys)
            code, started, err = cli.json(*argv)
            assert 0 == code, err
            assert ("reminder", "waiting", True) == (
                started["kind"],
                started["state"],
                started["created"],
            )
            assert 0 == cli.json(*argv)[0]


class TestStartAPurchase:
    def test_the_purchase_starts_its_own_way(self, engine, db_url, capsys):
        """A seat held at the catalogue's price; `purchase start` under the same id finds it."""
        engine.services.catalogue.add("js", seats=2, price="49.00", currency="EUR")
        cli = Cli(db_url, None, capsys)
        request = '{"intensive_id": "js", "student_id": "ann"}'
        code, started, err = cli.json(
            "instances", "start", "purchase", "--operation-id", "op-1", "--request", request
        )
        assert (0, "reserved", True) == (code, started["state"], started["created"]), err
        assert 4900 == started["data"]["amount_minor"]
        code, bought, _ = cli.json(
            "purchase", "start", "--operation-id", "op-1", "--intensive", "js", "--student", "ann"
        )
        assert (0, started["id"]) == (code, bought["id"])
        assert 1 == engine.services.catalogue.get("js").held

    @pytest.mark.parametrize(
        ("request_text", "named"),
        [
            ('{"intensive_id": "js", "student_id": "bob", "amount_minor": 1}', "'amount_minor'"),
            ('{"intensive_id": "js"}', "student_id is missing"),
            ('{"intensive_id": "js", "student_id": "bob", "hold_seconds": "x"}', "hold_seconds"),
        ],
    )
    def test_a_price_or_a_missing_field_is_refused(
        self, engine, db_url, capsys, request_text, named
    ):
        """The caller never sets the price; what the purchase needs is named (exit 2)."""
        engine.services.catalogue.add("js", seats=2, price="49.00", currency="EUR")
        before = dump(engine)
        code, _, err = Cli(db_url, None, capsys).json(
            "instances", "start", "purchase", "--operation-id", "op-1", "--request", request_text
        )
        assert 2 == code
        assert named in err
        assert before == dump(engine)


class TestListAndShow:
    def test_an_unknown_state_exits_2_naming_the_known_ones(self, approvals):
        """`--state nope` is bad input, with or without --kind; a declared state lists."""
        _, cli = approvals
        start(cli, "doc-1", "{}")
        code, out, err = cli.json("instances", "list", "--state", "nope")
        assert (2, None) == (code, out)
        assert "--state: 'nope' is no state of any kind" in err
        assert "approval: submitted, escalated, approved, rejected" in err
        code, _, err = cli.json("instances", "list", "--kind", "approval", "--state", "nope")
        assert 2 == code
        assert "'nope' is no state of approval; its states are submitted, escalated" in err
        code, listed, _ = cli.json("instances", "list", "--state", "submitted")
        assert (0, 1) == (code, len(listed))
        code, listed, _ = cli.json("instances", "list", "--state", "approved")
        assert (0, []) == (code, listed)

    def test_list_and_show_give_the_definition_version(self, approvals):
        """JSON: definition_version; text: a DEFINITION column and the show's first line."""
        _, cli = approvals
        _, started, _ = start(cli, "doc-1", "{}")
        _, listed, _ = cli.json("instances", "list")
        assert [1] == [s["definition_version"] for s in listed]
        code, out, _ = cli("instances", "list")
        assert 0 == code
        header, row = out.splitlines()[:2]
        assert header.split()[:3] == ["ID", "KIND", "DEFINITION"]
        assert row.split()[:3] == [started["id"], "approval", "v1"]
        _, out, _ = cli("instances", "show", started["id"])
        assert (
            out.splitlines()[0] == f"approval {started['id']}: submitted, version 1, definition v1"
        )


class TestCancel:
    def test_a_kind_without_cancel_exits_2_naming_its_events(self, approvals):
        """Approvals declare no cancel: said so (exit 2), the saga untouched."""
        engine, cli = approvals
        _, started, _ = start(cli, "doc-1", "{}")
        before = dump(engine)
        code, out, err = cli.json(
            "instances", "cancel", started["id"], "--actor", "ann", "--reason", "r"
        )
        assert (2, None) == (code, out)
        assert (
            "cancel: approval (definition v1) has no cancel event; "
            "its events are approve, reject, review_overdue"
        ) in err
        assert before == dump(engine)

    def test_an_unknown_saga_still_exits_4(self, approvals):
        """The kind is read from the saga: no saga, not found."""
        _, cli = approvals
        assert 4 == cli.json("instances", "cancel", "nope", "--actor", "ann", "--reason", "r")[0]
