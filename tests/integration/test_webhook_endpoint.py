"""
``POST /webhooks/<provider>``: signed webhooks into the inbox, over HTTP.

The signature is checked before anything is stored; a refused request is
answered 4xx, recorded in ``inbox_refusals`` and changes nothing else (the
business tables dump the same); a valid one is answered 2xx only once the
inbox row committed.  Most tests go through the real WSGI application with
Flask's test client on both backends; one runs ``saga webhook serve`` and
talks to it over a socket.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from saga import Engine
from saga.core.messages.signatures import SIGNATURE_HEADER, sign
from saga.core.messages.webhooks import WebhookDoor
from saga.examples.approvals import app as approval_app
from saga.exceptions import InvalidInput
from saga.web import create_app
from tests import schemas
from tests.helpers import dump, rows
from tests.integration.test_guards import start, steps
from tests.purchases import cli_json

SECRET = "whsec_test_0123456789"


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


@pytest.fixture
def client(shop):
    return create_app(shop, door=WebhookDoor(shop, {"sandbox": (SECRET,)})).test_client()


def post(client, body, *, secret=SECRET, at=None, provider="sandbox", header=None):
    """POST ``body`` (a dict or raw bytes) signed with ``secret`` at ``at`` (default now)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    if header is None and secret is not None:
        header = sign(secret, raw, timestamp=int(time.time() if at is None else at)).value
    headers = {} if header is None else {SIGNATURE_HEADER: header}
    return client.post(f"/webhooks/{provider}", data=raw, headers=headers)


def paid_at_provider(shop):
    """A purchase whose payment the provider holds as pending, then settles on its side."""
    purchase = start(shop, "pm_late")
    steps(shop, "purchase.request_payment").run(burst=True)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    with shop.services.sandbox.db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE sandbox_charges SET status = 'succeeded', charged_minor = amount_minor "
                "WHERE payment_id = :payment_id"
            ),
            {"payment_id": payment_id},
        )
    return purchase, payment_id


def succeeded(payment_id, event_id="evt_1"):
    return {
        "event_id": event_id,
        "type": "payment.succeeded",
        "payment_id": payment_id,
        "amount_minor": 4900,
        "currency": "EUR",
    }


def refusals(shop):
    return [(r["source"], r["reason"]) for r in rows(shop, "SELECT * FROM inbox_refusals")]


def test_a_signed_event_is_applied_and_answered_200(shop, client):
    """The provider's success, signed: 200 once committed, and the purchase confirms."""
    purchase, payment_id = paid_at_provider(shop)
    answer = post(client, succeeded(payment_id))
    assert (200, "applied") == (answer.status_code, answer.json["outcome"])
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    assert [] == refusals(shop)


def test_a_repeat_is_a_200_duplicate_that_changes_nothing(shop, client):
    """Providers retry: the same event again answers 200, marked duplicate, nothing moves."""
    _, payment_id = paid_at_provider(shop)
    post(client, succeeded(payment_id))
    before = dump(shop)
    again = post(client, succeeded(payment_id))
    assert (200, True) == (again.status_code, again.json["duplicate"])
    assert before == dump(shop)


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ({"secret": "whsec_someone_else"}, "mismatch"),
        ({"at": time.time() - 3600}, "stale"),
        ({"at": time.time() + 3600}, "stale"),
        ({"header": None, "secret": None}, "unsigned"),
        ({"header": "v1=deadbeef"}, "malformed"),
        ({"header": "t=soon,v1=deadbeef"}, "malformed"),
    ],
    ids=["other-secret", "replayed-an-hour-late", "from-the-future", "unsigned", "no-t", "bad-t"],
)
def test_a_bad_signature_is_refused_with_400_recorded_and_changes_nothing(
    shop, client, how, reason
):
    """Checked before anything is stored: the business tables dump the same."""
    purchase, payment_id = paid_at_provider(shop)
    before = dump(shop)
    answer = post(client, succeeded(payment_id), **how)
    assert (400, reason) == (answer.status_code, answer.json["refused"])
    assert before == dump(shop)
    assert "payment_pending" == shop.services.purchases.get(purchase.id).state
    assert [("sandbox", reason)] == refusals(shop)


def test_a_body_changed_after_signing_is_refused(shop, client):
    """The HMAC covers the exact bytes: more money claimed than was signed is a mismatch."""
    _, payment_id = paid_at_provider(shop)
    signed = json.dumps(succeeded(payment_id)).encode()
    header = sign(SECRET, signed, timestamp=int(time.time())).value
    forged = signed.replace(b"4900", b"9900")
    before = dump(shop)
    answer = post(client, forged, header=header)
    assert (400, "mismatch") == (answer.status_code, answer.json["refused"])
    assert before == dump(shop)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        ({"event_id": "evt_1", "type": "payment.succeeded"}, "payment_id"),
        ({**succeeded("pay_1"), "amount_minor": "4900"}, "amount_minor"),
        ({**succeeded("pay_1"), "amount_minor": True}, "amount_minor"),
        ({**succeeded("pay_1"), "type": "payment.teleported"}, "type"),
    ],
    ids=["not-json", "not-an-object", "no-payment", "amount-as-text", "amount-as-bool", "type"],
)
def test_a_malformed_body_is_refused_with_400_naming_the_problem(shop, client, body, named):
    """Signed but unreadable: 400 with the field named, recorded, nothing changed."""
    before = dump(shop)
    answer = post(client, body)
    assert (400, "malformed") == (answer.status_code, answer.json["refused"])
    assert named in answer.json["detail"]
    assert before == dump(shop)
    assert [("sandbox", "malformed")] == refusals(shop)


def test_an_unknown_provider_is_404_and_recorded(shop, client):
    """Only providers with a receiver and a secret are served."""
    before = dump(shop)
    answer = post(client, succeeded("pay_1"), provider="stripe")
    assert (404, "unknown_provider") == (answer.status_code, answer.json["refused"])
    assert before == dump(shop)
    assert [("stripe", "unknown_provider")] == refusals(shop)


def test_the_same_event_id_with_other_content_is_409_and_not_applied(shop, client):
    """A conflict is recorded by the inbox, never applied; the sender hears 409."""
    purchase, payment_id = paid_at_provider(shop)
    post(client, {**succeeded(payment_id), "type": "payment.failed"})
    state = shop.services.purchases.get(purchase.id).state
    answer = post(client, succeeded(payment_id))
    assert (409, True) == (answer.status_code, answer.json["conflict"])
    assert state == shop.services.purchases.get(purchase.id).state


def test_an_event_no_purchase_knows_yet_is_kept_and_answered_404(shop, client):
    """It overtook the provider's answer: kept, and the sender is told to send it again."""
    answer = post(client, succeeded("pay_nobody_knows"))
    assert (404, "unmatched") == (answer.status_code, answer.json["outcome"])
    assert 1 == len(rows(shop, "SELECT * FROM inbox WHERE event_id = 'evt_1'"))


def test_either_secret_is_accepted_while_one_is_rotated(shop):
    """Two secrets for one provider: a request signed with the old or the new one passes."""
    rotating = create_app(
        shop, door=WebhookDoor(shop, {"sandbox": ("whsec_new", SECRET)})
    ).test_client()
    _, payment_id = paid_at_provider(shop)
    assert 200 == post(rotating, succeeded(payment_id, "evt_a"), secret="whsec_new").status_code
    assert 200 == post(rotating, succeeded(payment_id, "evt_b"), secret=SECRET).status_code
    assert 400 == post(rotating, succeeded(payment_id, "evt_c"), secret="whsec_old").status_code


def test_a_provider_that_cannot_be_asked_is_503_and_nothing_is_stored(shop, client, monkeypatch):
    """Events are hints checked against the provider: no answer, no inbox row; retry later."""
    _, payment_id = paid_at_provider(shop)

    class Unreachable:
        def payment_status(self, *, key):
            msg = f"connection refused asking about {key}"
            raise ConnectionError(msg)

    monkeypatch.setattr(shop.services.inbox, "provider", Unreachable)
    before = dump(shop)
    answer = post(client, succeeded(payment_id))
    assert (503, "5") == (answer.status_code, answer.headers["Retry-After"])
    assert before == dump(shop)


@pytest.mark.parametrize(
    ("secrets", "problem"),
    [({}, "no webhook secret"), ({"stripe": ("x",)}, "no provider named stripe")],
)
def test_the_door_will_not_open_without_a_secret_for_a_known_provider(shop, secrets, problem):
    """A door that cannot check signatures stays shut; a typo in a provider's name is named."""
    with pytest.raises(InvalidInput) as refused:
        WebhookDoor(shop, secrets)
    assert ("secret", True) == (refused.value.field, problem in refused.value.problem)


def test_an_applications_inbox_route_is_served_too(db_url):
    """A user's application: its routes' source takes {event_id, type, payload}."""
    with Engine(db_url, app=approval_app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=approval_app) as approvals:
        door = WebhookDoor(approvals, {"esign": (SECRET,)})
        client = create_app(approvals, door=door).test_client()
        saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
        body = {
            "event_id": "sig-1",
            "type": "document.signed",
            "payload": {"reference": saga.id, "signature": "ann"},
        }
        answer = post(client, body, provider="esign")
        assert (200, "approved") == (answer.status_code, answer.json["state"])


def http_post(host, port, body, headers):
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/webhooks/sandbox", body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


@contextlib.contextmanager
def serving(shop, secret=SECRET):
    """``saga webhook serve`` on a free port: its host and port; SIGTERM at the end."""
    url = shop.db.url.render_as_string(hide_password=False)
    env = {**os.environ, "SAGA_WEBHOOK_SECRET_SANDBOX": secret}
    command = [
        *(sys.executable, "-m", "saga", "webhook", "serve", "--port", "0", "--db", url),
        *("--sandbox-db", shop.services.sandbox_url, "--log-level", "error"),
    ]
    with subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    ) as server:
        try:
            first = server.stderr.readline()
            assert first.startswith("saga webhook serve: listening on http://127.0.0.1:"), first
            host, port = first.split()[-1].removeprefix("http://").split(":")
            yield host, port
        finally:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=30)
        assert 0 == code


def test_saga_webhook_serve_answers_over_http_and_stops_on_sigterm(shop):
    """The real server: bound to 127.0.0.1, a signed event applied, SIGTERM ends it with 0."""
    purchase, payment_id = paid_at_provider(shop)
    with serving(shop) as (host, port):
        raw = json.dumps(succeeded(payment_id)).encode()
        signature = sign(SECRET, raw, timestamp=int(time.time())).value
        assert 200 == http_post(host, port, raw, {SIGNATURE_HEADER: signature})
        assert 400 == http_post(host, port, raw, {})
        assert "confirmed" == shop.services.purchases.get(purchase.id).state


def work_through_http(shop, host, port, secret):
    """``saga worker --burst`` with the sandbox sending its webhooks to the server."""
    url = shop.db.url.render_as_string(hide_password=False)
    env = {
        **os.environ,
        "SAGA_SANDBOX_WEBHOOK_URL": f"http://{host}:{port}",
        "SAGA_WEBHOOK_SECRET_SANDBOX": secret,
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "saga", "worker", "--burst", "--db", url),
            *("--sandbox-db", shop.services.sandbox_url, "--log-level", "error"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr


@pytest.mark.slow
def test_the_sandbox_signs_its_webhooks_and_sends_them_over_http(shop):
    """A real provider's path: the sandbox's webhooks reach the inbox through the server."""
    purchase = start(shop, "pm_duplicate_webhooks")
    with serving(shop) as (host, port):
        work_through_http(shop, host, port, SECRET)
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    assert rows(shop, "SELECT event_id FROM inbox")
    assert [] == refusals(shop)
    assert None is shop.services.sandbox.next_webhook_in()


@pytest.mark.slow
def test_a_sandbox_with_the_wrong_secret_is_refused_and_keeps_its_webhooks(shop):
    """Every request refused and recorded; nothing reaches the inbox; the webhooks wait."""
    purchase = start(shop, "pm_ok")
    with serving(shop) as (host, port):
        work_through_http(shop, host, port, "whsec_not_the_servers")
    assert (
        "confirmed" == shop.services.purchases.get(purchase.id).state
    )  # the create answer said so
    assert [] == rows(shop, "SELECT event_id FROM inbox")
    assert {("sandbox", "mismatch")} == set(refusals(shop))
    assert shop.services.sandbox.next_webhook_in() is not None


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("t=" + "9" * 400 + ",v1=" + "0" * 64, "malformed"),
        ("t=1796180000,v1=\u00e9", "malformed"),
        ("t=1796180000,v1=" + "0" * 63, "malformed"),
    ],
    ids=["huge-timestamp", "not-ascii", "short-mac"],
)
def test_a_signature_header_out_of_shape_is_a_recorded_400_not_a_crash(
    shop, client, header, reason
):
    """Parsed strictly before any arithmetic or comparison: refused and recorded."""
    answer = post(client, succeeded("pay_1"), header=header)
    assert (400, reason) == (answer.status_code, answer.json["refused"])
    assert [("sandbox", reason)] == refusals(shop)


def test_a_body_with_a_nul_byte_is_still_recorded_when_refused(shop, client):
    """PostgreSQL text holds no NUL: the excerpt is escaped, never the record lost."""
    answer = post(client, b'\x00{"event_id": "evt_1"}', secret="whsec_someone_else")
    assert 400 == answer.status_code
    (row,) = rows(shop, "SELECT reason, body_excerpt FROM inbox_refusals")
    assert ("mismatch", True) == (row["reason"], row["body_excerpt"].startswith("\\x00"))


def test_an_empty_secret_is_no_secret(shop):
    """Anyone can compute an HMAC with an empty key: it never opens the door."""
    with pytest.raises(InvalidInput):
        WebhookDoor(shop, {"sandbox": ("",)})
    door = create_app(shop, door=WebhookDoor(shop, {"sandbox": ("", SECRET)})).test_client()
    _, payment_id = paid_at_provider(shop)
    assert 400 == post(door, succeeded(payment_id), secret="").status_code
    assert 200 == post(door, succeeded(payment_id), secret=SECRET).status_code


def test_refusals_are_pruned_with_the_other_finished_rows(shop, client):
    """inbox_refusals grows with anonymous requests: `saga prune` keeps it bounded."""
    from saga.core.ops.prune import Pruner

    post(client, succeeded("pay_1"), secret="whsec_someone_else")
    assert 1 == len(refusals(shop))
    report = Pruner(shop.db, older_than_s=0.0).run()
    assert 1 == report.pruned["refusals"]
    assert [] == refusals(shop)


def test_saga_webhook_refusals_lists_what_the_door_turned_away(shop, client, capsys):
    """Operators see an attack or a mistyped secret: newest first, with the reason."""
    post(client, succeeded("pay_1"), secret="whsec_someone_else")
    post(client, succeeded("pay_1"), provider="stripe")
    code, listed = cli_json(
        capsys, "webhook", "refusals", "--db", shop.db.url.render_as_string(False)
    )
    assert 0 == code
    assert [("stripe", "unknown_provider"), ("sandbox", "mismatch")] == [
        (r["source"], r["reason"]) for r in listed
    ]
