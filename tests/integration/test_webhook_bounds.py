"""
What a sender can make the engine store at its webhook door is bounded.

A refused request changes nothing but two bounded records: one more in its
hour's count per provider and reason (``inbox_refusal_counts``; a provider
the application does not know is counted as ``(unknown)``), and a place in
the sample of the newest refusals (``inbox_refusals``, trimmed to the door's
``sample``).  An unsigned request is refused before the database is asked
anything.  The real server answers 431 to headers over 32 KiB.
"""

from __future__ import annotations

import http.client
import json
import time

import pytest

from saga.core.messages.signatures import SIGNATURE_HEADER, sign
from saga.core.messages.webhooks import (
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    UNKNOWN_SOURCE,
    WebhookDoor,
)
from saga.core.ops.prune import Pruner
from saga.exceptions import InvalidInput
from saga.web import create_app
from tests.contract.test_schema import _engine_migrations_only
from tests.helpers import rows
from tests.integration.test_webhook_endpoint import SECRET, post, serving, succeeded
from tests.purchases import cli_json

SAMPLE = 20


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


@pytest.fixture
def door(shop):
    return WebhookDoor(shop, {"sandbox": (SECRET,)}, sample=SAMPLE)


@pytest.fixture
def client(shop, door):
    return create_app(shop, door=door).test_client()


def counts(shop):
    """Refusals counted per (source, reason), over every hour."""
    found: dict[tuple[str, str], int] = {}
    for row in rows(shop, "SELECT source, reason, n FROM inbox_refusal_counts"):
        key = (row["source"], row["reason"])
        found[key] = found.get(key, 0) + int(row["n"])
    return found


def sample_size(shop):
    return int(rows(shop, "SELECT count(*) AS n FROM inbox_refusals")[0]["n"])


def count_rows(shop):
    return int(rows(shop, "SELECT count(*) AS n FROM inbox_refusal_counts")[0]["n"])


def test_many_unsigned_requests_leave_at_most_the_bound_of_rows(shop, client):
    """300 refused requests of three kinds: every one counted, at most SAMPLE kept whole."""
    for i in range(150):
        assert 400 == post(client, succeeded(f"pay_{i}"), secret=None).status_code
    for i in range(100):
        assert 400 == post(client, succeeded(f"pay_{i}"), secret="whsec_other").status_code
    for i in range(50):  # a new made-up provider name each time
        assert 404 == post(client, succeeded("pay_1"), provider=f"made-up-{i}").status_code
    assert sample_size(shop) <= SAMPLE
    assert {
        ("sandbox", "unsigned"): 150,
        ("sandbox", "mismatch"): 100,
        (UNKNOWN_SOURCE, "unknown_provider"): 50,
    } == counts(shop)
    # One row per hour, provider and reason: two hours at most, if the run crossed one.
    assert count_rows(shop) <= 2 * 3
    newest = rows(shop, "SELECT source, reason FROM inbox_refusals ORDER BY id DESC")[0]
    assert ("made-up-49", "unknown_provider") == (newest["source"], newest["reason"])


def test_the_sample_keeps_the_newest_refusals(shop, client):
    """Trimmed from the oldest: the sample is the last SAMPLE requests, in order."""
    for i in range(SAMPLE + 5):
        post(client, {"n": i}, secret=None)
    kept = rows(shop, "SELECT body_excerpt FROM inbox_refusals ORDER BY id")
    assert [{"n": i} for i in range(5, SAMPLE + 5)] == [json.loads(r["body_excerpt"]) for r in kept]


def test_an_unsigned_request_is_refused_before_the_database_is_asked(shop, door, monkeypatch):
    """Neither the clock nor the receiver is reached without a signature of the right shape."""

    def asked():
        raise AssertionError("the database clock was read for an unsigned request")

    monkeypatch.setattr(door, "_now", asked)
    body = json.dumps(succeeded("pay_1")).encode()
    assert "unsigned" == door.receive("sandbox", body, None).body["refused"]
    assert "malformed" == door.receive("sandbox", body, "t=1,v1=zz").body["refused"]
    assert {("sandbox", "unsigned"): 1, ("sandbox", "malformed"): 1} == counts(shop)


def test_a_body_over_the_limit_is_413_counted_with_its_size(shop, client):
    big = b"x" * (MAX_BODY_BYTES + 1)
    assert 413 == post(client, big, secret=SECRET).status_code
    (row,) = rows(shop, "SELECT reason, n, bytes FROM inbox_refusal_counts")
    assert ("too_large", 1, MAX_BODY_BYTES + 1) == (row["reason"], row["n"], row["bytes"])
    assert 1 == sample_size(shop)


def test_a_door_that_keeps_no_sample_is_refused(shop):
    with pytest.raises(InvalidInput, match="sample"):
        WebhookDoor(shop, {"sandbox": (SECRET,)}, sample=0)


def test_saga_webhook_refusals_counts_per_hour_provider_and_reason(shop, client, capsys):
    for _ in range(3):
        post(client, succeeded("pay_1"), secret=None)
    post(client, succeeded("pay_1"), provider="stripe")
    long_ago = "2000-01-01T00:00:00Z"  # outside the window: not listed
    shop.db.transaction(
        lambda tx: tx.execute_sql(
            "INSERT INTO inbox_refusal_counts (hour, source, reason, n, bytes, last_at) "
            "VALUES (:at, 'sandbox', 'stale', 7, 0, :at)",
            {"at": long_ago},
        )
    )
    url = shop.db.url.render_as_string(False)
    code, listed = cli_json(capsys, "webhook", "refusals", "--counts", "--db", url)
    assert 0 == code
    assert [
        (UNKNOWN_SOURCE, "unknown_provider", 1),
        ("sandbox", "unsigned", 3),
    ] == sorted((r["source"], r["reason"], r["count"]) for r in listed)
    assert all(r["hour"].endswith(":00:00Z") or ":00:00" in r["hour"] for r in listed)


def test_saga_webhook_refusals_refuses_a_window_out_of_range(shop, capsys):
    url = shop.db.url.render_as_string(False)
    code, _ = cli_json(capsys, "webhook", "refusals", "--counts", "--hours", "0", "--db", url)
    assert 2 == code


def test_prune_removes_the_counts_past_the_window(shop, client):
    post(client, succeeded("pay_1"), secret=None)
    assert 1 == count_rows(shop)
    Pruner(shop.db, older_than_s=0.0).run()
    assert 0 == count_rows(shop)
    assert 0 == sample_size(shop)


def test_a_database_from_before_the_counts_upgrades_and_keeps_its_refusals(db_url):
    """Migration 0013 adds the counts beside the refusals already recorded."""
    with _engine_migrations_only(db_url, upto=12) as old:
        old.db.transaction(
            lambda tx: tx.execute_sql(
                "INSERT INTO inbox_refusals (source, reason, detail, body_digest, body_excerpt) "
                "VALUES ('sandbox', 'unsigned', 'old', 'd', 'e')"
            )
        )
        assert "0013_refusal_counts" in old.upgrade().applied
        door = WebhookDoor(old, {"sandbox": (SECRET,)})
        assert 400 == door.receive("sandbox", b"{}", None).status
        assert 2 == sample_size(old)
        assert {("sandbox", "unsigned"): 1} == counts(old)


@pytest.mark.slow
def test_the_server_answers_431_to_headers_over_the_limit(shop):
    """Refused by the server before the application: nothing is recorded."""
    with serving(shop) as (host, port):
        raw = json.dumps(succeeded("pay_1")).encode()
        signed = sign(SECRET, raw, timestamp=int(time.time())).value
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request(
                "POST",
                "/webhooks/sandbox",
                body=raw,
                headers={SIGNATURE_HEADER: signed, "X-Padding": "p" * MAX_HEADER_BYTES},
            )
            assert 431 == connection.getresponse().status
        finally:
            connection.close()
    assert 0 == sample_size(shop)
    assert 0 == count_rows(shop)
