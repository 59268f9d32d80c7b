"""The event commands' contract: exit codes, JSON fields, nothing changed on bad input."""

from __future__ import annotations

import pytest

from saga import Engine
from saga.cli import main
from tests.helpers import execute, rows
from tests.outbox_app import app
from tests.purchases import cli_json

APP = "tests.outbox_app:orders"


@pytest.fixture
def db(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SAGA_BROKER_URL", raising=False)
    url = f"sqlite:///{tmp_path}/events.db"
    assert 0 == cli_json(capsys, "db", "upgrade", "--db", url, "--app", APP)[0]
    return url


def test_relay_without_anywhere_to_publish_is_bad_input(db, capsys):
    """No broker and no in-process subscriber: exit 2 naming --broker."""
    capsys.readouterr()
    assert 2 == main(["relay", "--burst", "--db", db, "--app", APP])
    assert "--broker: nowhere to publish" in capsys.readouterr().err


def test_outbox_list_gives_the_documented_fields(db, capsys):
    """An event's JSON fields, as docs/cli.md lists them."""
    with Engine(db, app=app()) as engine:
        engine.sagas.start("order", operation_id="o1", request={"customer_id": "c", "total": 1})
    code, listing = cli_json(capsys, "outbox", "list", "--db", db, "--app", APP)
    assert 0 == code
    (event,) = listing["events"]
    assert {
        "id",
        "type",
        "schema_version",
        "saga_id",
        "saga_version",
        "occurred_at",
        "data",
        "published_at",
        "dead_at",
        "attempts",
        "errors",
        "last_error",
    } == set(event)
    assert (None, None) == (event["published_at"], event["dead_at"])


def test_replaying_an_event_that_is_not_dead_is_not_found(db, capsys):
    """outbox replay --event of a live or unknown event exits 4 and changes nothing."""
    code, _ = cli_json(capsys, "outbox", "replay", "--event", "nope", "--db", db, "--app", APP)
    assert 4 == code


def test_stats_show_the_outbox(db, capsys):
    """saga stats carries the outbox figures."""
    code, stats = cli_json(capsys, "stats", "--db", db, "--app", APP)
    assert 0 == code
    assert {
        "unpublished",
        "dead",
        "oldest_unpublished_age_s",
        "published",
        "published_last_minute",
        "publish_rate_per_s",
        "failing",
        "broker_errors",
        "last_error",
    } == set(stats["outbox"])


def test_consume_an_unknown_consumer_is_not_found(db, capsys):
    """A consumer the application does not declare exits 4."""
    code, _ = cli_json(capsys, "consume", "nope", "--figures", "--db", db, "--app", APP)
    assert 4 == code


def test_replaying_a_dead_event_is_audited(db, capsys):
    """outbox replay --all revives dead events and records who, why and the error."""
    with Engine(db, app=app()) as engine:
        engine.sagas.start("order", operation_id="o1", request={"customer_id": "c", "total": 1})
        dead = "UPDATE outbox SET dead_at = created_at, last_error = 'refused', errors = 10"
        execute(engine, dead)
    code, out = cli_json(
        capsys,
        "outbox",
        "replay",
        "--all",
        "--actor",
        "ann",
        "--reason",
        "schema fixed",
        "--db",
        db,
        "--app",
        APP,
    )
    assert 0 == code
    assert 1 == len(out["replayed"])
    with Engine(db, app=app()) as engine:
        audit = rows(engine, "SELECT event_id, actor, reason, previous_error FROM outbox_replays")
        assert [(out["replayed"][0], "ann", "schema fixed", "refused")] == [
            tuple(row.values()) for row in audit
        ]
        assert [(None, 0)] == [
            (r["dead_at"], r["errors"]) for r in rows(engine, "SELECT dead_at, errors FROM outbox")
        ]
