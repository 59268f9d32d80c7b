"""
Contract: a database of the previous version keeps every provider event when the inboxes merge.

The purchase kept its provider's events in tables of its own (``inbox``,
``inbox_conflicts``, purchase migrations 0001-0002, engine 0013).  Engine
migration 0014 and purchase migration 0003 move them into the engine's inbox
and drop the old tables: every event, its door, content, digest, saga,
outcome, detail, time and evidence, and every recorded conflict, carried
over; an old event delivered again afterwards is still a duplicate.
"""

from __future__ import annotations

from typing import Any

import pytest

from saga import Engine
from saga.codec import digest, dump_json, load_json
from saga.core.store.migrate import current_versions, required_versions
from saga.core.store.sqlfiles import migrations, split_statements, tracking_table
from saga.purchase.app import PURCHASE_SQL
from saga.purchase.inbox import ProviderEvent
from tests.helpers import execute, rows, scalar

PREVIOUS_ENGINE = 13
PREVIOUS_PURCHASE = 2

PAID = ProviderEvent(
    event_id="evt-paid",
    type="payment.succeeded",
    payment_id="pay_1",
    amount_minor=4990,
    currency="EUR",
)
FORGED = ProviderEvent(
    event_id="evt-forged",
    type="payment.succeeded",
    payment_id="pay_1",
    amount_minor=5990,
    currency="EUR",
)
EARLY = ProviderEvent(
    event_id="evt-early", type="refund.succeeded", payment_id="pay_9", refund_id="re_9"
)
PROVIDER = {"payment": {"found": True, "status": "succeeded", "charged_minor": 4990}}


def _previous_version(url: str) -> Engine:
    """A database exactly as the previous version's ``saga db upgrade`` left it."""
    engine = Engine(url, check_schema=False)

    def work(tx: Any) -> None:
        tx.script(split_statements(tracking_table(tx.dialect)))
        for migration in migrations(tx.dialect)[:PREVIOUS_ENGINE]:
            tx.script(split_statements(migration.sql))
            tx.run(
                "record_migration",
                version=migration.version,
                name=migration.name,
                checksum=migration.checksum,
            )
        for migration in PURCHASE_SQL.migrations(tx.dialect)[:PREVIOUS_PURCHASE]:
            tx.script(split_statements(migration.sql))
            tx.run(
                "record_component_migration",
                component="purchase",
                version=migration.version,
                name=migration.name,
                checksum=migration.checksum,
            )

    engine.db.transaction(work)
    return engine


def _json(engine: Engine, name: str) -> str:
    return f"CAST(:{name} AS jsonb)" if engine.db.dialect == "postgres" else f":{name}"


def _fill_like_the_old_code(old: Engine) -> None:
    """Rows as the purchase's own inbox wrote them (insert_inbox_event, then settle)."""
    execute(
        old,
        "INSERT INTO sagas (id, kind, definition_version, state) "
        "VALUES ('s-1', 'purchase', 1, 'confirmed')",
    )
    events = [
        (PAID, "sandbox", "s-1", "applied", None, {"provider": PROVIDER, "contradictions": []}),
        (
            FORGED,
            "cli",
            "s-1",
            "absorbed",
            "the event says 5990 EUR, the provider charged 4990 EUR",
            {
                "provider": PROVIDER,
                "contradictions": ["the event says 5990 EUR, the provider charged 4990 EUR"],
                "review_item": "rev-1",
            },
        ),
        (EARLY, "sandbox", None, "unmatched", "no purchase knows payment pay_9", None),
    ]
    for event, source, saga_id, outcome, detail, evidence in events:
        execute(
            old,
            "INSERT INTO inbox (event_id, source, type, payment_ref, digest, payload, outcome) "
            f"VALUES (:event_id, :source, :type, :ref, :digest, {_json(old, 'payload')}, "
            "'unmatched')",
            event_id=event.event_id,
            source=source,
            type=event.type,
            ref=event.payment_id,
            digest=digest(event.payload()),
            payload=dump_json(event.payload()),
        )
        execute(
            old,
            "UPDATE inbox SET saga_id = :saga_id, outcome = :outcome, detail = :detail, "
            f"evidence = {_json(old, 'evidence')} WHERE event_id = :event_id",
            event_id=event.event_id,
            saga_id=saga_id,
            outcome=outcome,
            detail=detail,
            evidence=None if evidence is None else dump_json(evidence),
        )
    other = {**PAID.payload(), "amount_minor": 1}
    execute(
        old,
        f"INSERT INTO inbox_conflicts (event_id, digest, payload) "
        f"VALUES ('evt-paid', :digest, {_json(old, 'payload')})",
        digest=digest(other),
        payload=dump_json(other),
    )
    # Another application's message in the engine's inbox: left as it was.
    execute(
        old,
        "INSERT INTO inbox_messages (source, event_id, type, digest, payload, outcome) "
        f"VALUES ('esign', 'sig-1', 'document.signed', 'd', {_json(old, 'payload')}, "
        "'unmatched')",
        payload=dump_json({"type": "document.signed", "payload": {}}),
    )


def _doc(value: Any) -> Any:
    return load_json(value) if isinstance(value, str) else value


def _tables(engine: Engine) -> set[str]:
    if engine.db.dialect == "sqlite":
        found = rows(engine, "SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        found = rows(
            engine,
            "SELECT table_name AS name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
        )
    return {row["name"] for row in found}


@pytest.fixture
def upgraded(db_url):
    """The previous version's database, filled, read, then upgraded."""
    with _previous_version(db_url) as old:
        _fill_like_the_old_code(old)
        before = {
            "inbox": rows(old, "SELECT * FROM inbox ORDER BY event_id"),
            "conflicts": rows(old, "SELECT * FROM inbox_conflicts ORDER BY id"),
            "messages": rows(old, "SELECT * FROM inbox_messages ORDER BY source, event_id"),
        }
        assert {"engine": PREVIOUS_ENGINE, "purchase": PREVIOUS_PURCHASE} == current_versions(
            old.db
        )
        result = old.upgrade()
        assert {"0014_observed_messages", "purchase/0003_one_inbox"} <= set(result.applied)
        assert required_versions(old.db) == current_versions(old.db)
    with Engine(db_url) as engine:
        yield engine, before


def test_every_old_event_is_carried_over_whole(upgraded):
    """Each old inbox row is one engine message of source 'provider', nothing lost."""
    engine, before = upgraded
    after = rows(engine, "SELECT * FROM inbox_messages WHERE source = 'provider' ORDER BY event_id")
    assert len(before["inbox"]) == len(after) == 3
    for old, new in zip(before["inbox"], after, strict=True):
        assert (old["event_id"], old["source"], old["type"], old["digest"]) == (
            new["event_id"],
            new["via"],
            new["type"],
            new["digest"],
        )
        assert {"type": old["type"], "payload": _doc(old["payload"])} == _doc(new["payload"])
        assert old["payment_ref"] == _doc(new["payload"])["payload"]["payment_id"]
        assert (old["saga_id"], old["outcome"], old["detail"], old["received_at"]) == (
            new["saga_id"],
            new["outcome"],
            new["detail"],
            new["received_at"],
        )
        evidence = _doc(old["evidence"])
        if evidence is None:
            assert new["evidence"] is None
            continue
        renamed = {k: v for k, v in evidence.items() if k not in ("provider", "contradictions")}
        renamed |= {"observed": evidence["provider"], "disagreements": evidence["contradictions"]}
        assert renamed == _doc(new["evidence"])


def test_every_old_conflict_is_carried_over_and_others_messages_stay(upgraded):
    """Recorded conflicts move with their content; another source's messages are untouched."""
    engine, before = upgraded
    after = rows(
        engine, "SELECT * FROM inbox_message_conflicts WHERE source = 'provider' ORDER BY id"
    )
    assert len(before["conflicts"]) == len(after) == 1
    for old, new in zip(before["conflicts"], after, strict=True):
        assert (old["event_id"], old["digest"], old["received_at"]) == (
            new["event_id"],
            new["digest"],
            new["received_at"],
        )
        content = _doc(old["payload"])
        assert {"type": content["type"], "payload": content} == _doc(new["payload"])
    kept = rows(engine, "SELECT * FROM inbox_messages WHERE source <> 'provider'")
    assert [dict(row, via=None, evidence=None) for row in before["messages"]] == kept


def test_the_old_tables_are_gone(upgraded):
    """Only read-only views keep the old names; no table of the old inbox remains."""
    engine, _ = upgraded
    assert not {"inbox", "inbox_conflicts"} & _tables(engine)
    assert ["evt-early", "evt-forged", "evt-paid"] == [
        row["event_id"] for row in rows(engine, "SELECT event_id FROM inbox ORDER BY event_id")
    ]
    assert 1 == scalar(engine, "SELECT count(*) FROM inbox_conflicts WHERE event_id = 'evt-paid'")


def test_an_old_event_delivered_again_is_a_duplicate_not_a_conflict(upgraded):
    """The digest of the old inbox is the route's: a redelivery changes nothing."""
    engine, _ = upgraded
    again = engine.services.inbox.deliver(PAID, source="sandbox")
    assert (True, False, "applied", "s-1") == (
        again.duplicate,
        again.conflict,
        again.outcome,
        again.saga_id,
    )
    other = engine.services.inbox.deliver(
        ProviderEvent(event_id="evt-paid", type="payment.failed", payment_id="pay_1")
    )
    assert other.conflict
    assert 2 == scalar(engine, "SELECT count(*) FROM inbox_message_conflicts")
    # Still no purchase knows pay_9: kept, matched again when it comes again.
    assert "unmatched" == engine.services.inbox.deliver(EARLY, source="sandbox").outcome
