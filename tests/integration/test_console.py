"""
The operators' console through its WSGI application (Flask's test client), on both backends.

Sign-in, sessions that expire by the database clock, CSRF on every form,
viewers who cannot act, and the actions (assign, resolve, replay) going
through the same engine calls as the CLI, with the signed-in operator as
the audit actor.  Each refusal is shown to change nothing.
"""

from __future__ import annotations

import contextlib
import http.client as http_client
import re
import signal
import socket
import subprocess
import sys
from urllib.parse import urlencode

import pytest

from saga.core.ops.operators import Operators
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.purchase.steps import PurchaseSteps
from saga.web import create_app
from saga.web.guard import SESSION_COOKIE
from tests.helpers import dump, execute, rows

# Console tests sign in again and again: see the fixture.
pytestmark = pytest.mark.usefixtures("cheap_password_hashing")

PASSWORD = "correct-horse-battery"


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    accounts = Operators(engine.db)
    accounts.add("ann", role="operator", password=PASSWORD)
    accounts.add("vic", role="viewer", password=PASSWORD)
    return engine


@pytest.fixture
def browser(shop):
    return create_app(shop, console=True).test_client()


def sign_in(client, name="ann", password=PASSWORD, next_page=""):
    page = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    return client.post(
        "/login", data={"csrf": token, "name": name, "password": password, "next": next_page}
    )


def csrf_of(client, path):
    page = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def unknown_payment(shop, method="pm_timeout_after_charge"):
    """A purchase whose payment call timed out (after charging, by default): an open item."""
    purchase = shop.services.purchases.start(
        operation_id="op-1",
        intensive_id="js",
        student_id="s-1",
        payment_method=method,
        hold_seconds=600,
    ).purchase
    kinds = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter).kinds()
    request = [k for k in kinds if k.name == "purchase.request_payment"]
    Worker(shop.db, Handlers(request), listen=False).run(burst=True)
    (item,) = shop.recon.find()
    return purchase, item


def resolve(client, item, outcome, reason="the provider shows the charge", **more):
    """Post the item page's resolve form, as the signed-in operator."""
    token = csrf_of(client, f"/recon/{item.id}")
    form = {"csrf": token, "version": str(item.version), "outcome": outcome, "reason": reason}
    return client.post(f"/recon/{item.id}/resolve", data={**form, **more}, follow_redirects=True)


def test_a_page_without_a_session_goes_to_the_sign_in_page(browser):
    """Nothing is shown to an anonymous visitor."""
    answer = browser.get("/recon")
    assert (302, "/login?next=/recon?") == (answer.status_code, answer.headers["Location"])


def test_a_wrong_password_opens_no_session(shop, browser):
    """401, the form again, and no session row."""
    answer = sign_in(browser, password="not-the-password")
    assert 401 == answer.status_code
    assert "wrong name or password" in answer.get_data(as_text=True)
    assert [] == rows(shop, "SELECT * FROM console_sessions")


def test_an_unknown_name_is_refused_like_a_wrong_password(browser):
    """The same answer, so that names cannot be probed."""
    assert 401 == sign_in(browser, name="nobody").status_code


def test_signing_in_sets_a_strict_http_only_cookie_and_stores_only_its_hash(shop, browser):
    """The token never reaches the database; JavaScript cannot read the cookie."""
    answer = sign_in(browser)
    assert (302, "/") == (answer.status_code, answer.headers["Location"])
    cookie = next(c for c in answer.headers.getlist("Set-Cookie") if SESSION_COOKIE in c)
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    token = cookie.split(";")[0].split("=", 1)[1]
    (stored,) = rows(shop, "SELECT token_hash, operator FROM console_sessions")
    assert "ann" == stored["operator"]
    assert token not in stored["token_hash"]


def test_the_sign_in_form_needs_its_csrf_token(browser):
    """A login posted from another site (no matching cookie and field) is refused."""
    answer = browser.post("/login", data={"name": "ann", "password": PASSWORD})
    assert 403 == answer.status_code


def test_next_never_leads_to_another_site(browser):
    """An open redirect through the sign-in page is refused: back to the overview."""
    answer = sign_in(browser, next_page="//evil.example/")
    assert "/" == answer.headers["Location"]


def test_an_operator_resolves_an_item_and_the_saga_moves(shop, browser):
    """Paid: the provider is asked again, agrees, the purchase confirms; the audit names ann."""
    purchase, item = unknown_payment(shop)
    sign_in(browser)
    answer = resolve(browser, item, "paid")
    assert 200 == answer.status_code
    assert "resolved as paid" in answer.get_data(as_text=True)
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    resolved = shop.recon.show(item.id)[0]
    assert ("resolved", "operator:ann") == (resolved.status, resolved.resolved_by)


def test_a_decision_the_provider_contradicts_is_refused_and_changes_nothing(shop, browser):
    """not_paid while the provider holds the money: the same refusal as the CLI's exit 3."""
    purchase, item = unknown_payment(shop)
    sign_in(browser)
    answer = resolve(browser, item, "not_paid", reason="x")
    assert "refused" in answer.get_data(as_text=True)
    assert "needs_reconciliation" == shop.services.purchases.get(purchase.id).state
    assert "open" == shop.recon.show(item.id)[0].status


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(shop, browser):
    """403: a page elsewhere cannot act with the operator's cookie."""
    _, item = unknown_payment(shop)
    sign_in(browser)
    before = dump(shop)
    for token in (None, "forged"):
        data = {"version": str(item.version), "outcome": "paid", "reason": "x"}
        if token is not None:
            data["csrf"] = token
        answer = browser.post(f"/recon/{item.id}/resolve", data=data)
        assert 403 == answer.status_code
        assert "CSRF" in answer.get_data(as_text=True)
    assert before == dump(shop)


def test_a_viewer_reads_but_cannot_act(shop, browser):
    """Pages yes; assign, resolve and replay are 403 and change nothing."""
    _, item = unknown_payment(shop)
    sign_in(browser, name="vic")
    page = browser.get(f"/recon/{item.id}")
    assert 200 == page.status_code
    assert "viewers cannot act" in page.get_data(as_text=True)
    token = csrf_of(browser, "/recon")
    before = dump(shop)
    for path, data in (
        (f"/recon/{item.id}/assign", {"version": str(item.version)}),
        (f"/recon/{item.id}/resolve", {"version": "1", "outcome": "paid", "reason": "x"}),
        ("/dlq/replay", {"all": "1"}),
    ):
        answer = browser.post(path, data={"csrf": token, **data})
        assert 403 == answer.status_code, path
    assert before == dump(shop)


def test_assigning_names_the_signed_in_operator_never_free_text(shop, browser):
    """There is no operator field to type into: the owner is the session's operator."""
    _, item = unknown_payment(shop)
    sign_in(browser)
    token = csrf_of(browser, f"/recon/{item.id}")
    browser.post(
        f"/recon/{item.id}/assign",
        data={"csrf": token, "version": str(item.version), "operator": "mallory"},
    )
    assert "ann" == shop.recon.show(item.id)[0].owner


def test_a_stale_version_is_refused(shop, browser):
    """The form was read at an older version: refused, as `--version` is on the CLI."""
    _, item = unknown_payment(shop)
    sign_in(browser)
    token = csrf_of(browser, f"/recon/{item.id}")
    answer = browser.post(
        f"/recon/{item.id}/assign",
        data={"csrf": token, "version": str(item.version + 5)},
        follow_redirects=True,
    )
    assert "refused" in answer.get_data(as_text=True)
    assert "checker" == shop.recon.show(item.id)[0].owner


def dead_letter(shop, job_id="poison-1"):
    queue = Queue(shop.db)
    from saga.queue import NewJob

    queue.enqueue(NewJob(id=job_id, queue="misc", kind="poison", payload={}))
    (job,) = queue.claim(["poison"], batch=1)
    queue.fail(job, error="boom", error_class="permanent")
    return job_id


def test_a_dead_letter_is_replayed_from_the_page_and_audited(shop, browser):
    """Replay one: pending again, the replay audited under the signed-in operator."""
    job_id = dead_letter(shop)
    sign_in(browser)
    token = csrf_of(browser, "/dlq")
    answer = browser.post("/dlq/replay", data={"csrf": token, "job": job_id}, follow_redirects=True)
    assert "replayed 1 dead letter" in answer.get_data(as_text=True)
    assert "pending" == Queue(shop.db).get(job_id).state
    (audit,) = rows(shop, "SELECT actor FROM job_replays")
    assert "operator:ann" == audit["actor"]


def test_a_dry_run_lists_and_changes_nothing(shop, browser):
    """A batch replay with dry run: the jobs named, the database untouched."""
    for n in range(3):
        dead_letter(shop, f"poison-{n}")
    sign_in(browser)
    token = csrf_of(browser, "/dlq")
    before = dump(shop)
    answer = browser.post(
        "/dlq/replay",
        data={"csrf": token, "queue": "misc", "all": "1", "dry_run": "1", "rate": "5"},
        follow_redirects=True,
    )
    assert "would replay 3 dead letter(s)" in answer.get_data(as_text=True)
    assert before == dump(shop)


def test_a_bad_rate_is_refused_naming_the_field(shop, browser):
    """rate=fast: refused with the field named, nothing replayed."""
    job_id = dead_letter(shop)
    sign_in(browser)
    token = csrf_of(browser, "/dlq")
    answer = browser.post(
        "/dlq/replay",
        data={"csrf": token, "queue": "misc", "all": "1", "rate": "fast"},
        follow_redirects=True,
    )
    assert "refused: rate" in answer.get_data(as_text=True)
    assert "failed" == Queue(shop.db).get(job_id).state


def long_ago(shop):
    """A time long past, as the backend stores it."""
    return "2000-01-01T00:00:00.000Z" if shop.db.dialect == "sqlite" else "2000-01-01T00:00:00Z"


def test_a_session_idle_too_long_has_ended(shop, browser):
    """Idle past its limit by the database clock: back to the sign-in page."""
    sign_in(browser)
    assert 200 == browser.get("/").status_code
    execute(shop, "UPDATE console_sessions SET last_seen_at = :past", past=long_ago(shop))
    assert 302 == browser.get("/").status_code


def test_a_session_past_its_lifetime_has_ended(shop, browser):
    """Used all the time, it still ends at its expiry."""
    sign_in(browser)
    execute(shop, "UPDATE console_sessions SET expires_at = :past", past=long_ago(shop))
    assert 302 == browser.get("/").status_code


def test_a_disabled_operator_is_signed_out_at_once(shop, browser):
    """Their sessions end with the account."""
    sign_in(browser)
    Operators(shop.db).disable("ann")
    assert 302 == browser.get("/").status_code
    assert 401 == sign_in(browser).status_code


def test_signing_out_ends_the_session(shop, browser):
    """The session row goes; the cookie no longer opens anything."""
    sign_in(browser)
    token = csrf_of(browser, "/")
    browser.post("/logout", data={"csrf": token})
    assert [] == rows(shop, "SELECT * FROM console_sessions")
    assert 302 == browser.get("/").status_code


def test_a_saga_is_found_by_its_operation_id_and_explained(shop, browser):
    """Search by operation id: its page, with why it is where it is."""
    purchase, _ = unknown_payment(shop)
    sign_in(browser)
    answer = browser.get("/sagas?q=op-1")
    assert f"/sagas/{purchase.id}" == answer.headers["Location"]
    page = browser.get(f"/sagas/{purchase.id}").get_data(as_text=True)
    assert "needs_reconciliation" in page
    assert "Why it is here" in page


@pytest.mark.parametrize("path", ["/", "/recon", "/dlq", "/sagas"])
def test_every_page_renders_for_a_viewer(shop, browser, path):
    """The main pages answer 200 with data in them."""
    unknown_payment(shop)
    dead_letter(shop)
    sign_in(browser, name="vic")
    assert 200 == browser.get(path).status_code


def test_bad_operator_input_is_refused_naming_the_field(shop):
    """A short password, an unknown role, a taken name: clear errors, nothing added."""
    from saga.core.ops.operators import OperatorExists
    from saga.exceptions import InvalidInput

    accounts = Operators(shop.db)
    with pytest.raises(InvalidInput, match="password"):
        accounts.add("bob", role="operator", password="short")
    with pytest.raises(InvalidInput, match="role"):
        accounts.add("bob", role="admin", password=PASSWORD)
    with pytest.raises(OperatorExists):
        accounts.add("ann", role="viewer", password=PASSWORD)
    assert ["ann", "vic"] == [o.name for o in accounts.list()]


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "/\t/evil.example/",
        "/\n/evil.example/",
        "/\r/evil.example/",
        "/\\evil.example/",
        "https://evil.example/",
        "/x\x00y",
    ],
    ids=["two-slashes", "tab", "newline", "carriage-return", "backslash", "absolute", "nul"],
)
def test_next_is_only_ever_a_path_of_this_site(browser, target):
    """Browsers drop tabs and line breaks and read a backslash as a slash: all refused."""
    answer = sign_in(browser, next_page=target)
    assert (302, "/") == (answer.status_code, answer.headers["Location"])


def test_next_keeps_a_path_of_this_site(browser):
    """The page that sent you to sign in is where you land."""
    answer = sign_in(browser, next_page="/recon?overdue=1")
    assert "/recon?overdue=1" == answer.headers["Location"]


def test_an_unknown_name_costs_one_verification_like_a_wrong_password(browser, monkeypatch):
    """The decoy hash is made once per process, not per request: no timing tells names apart."""
    from argon2 import PasswordHasher

    from saga.core.ops import operators as _operators

    monkeypatch.setattr(_operators, "_decoy", [])
    hashes = []
    real_hash = PasswordHasher.hash

    def counting(self, password, *, salt=None):
        hashes.append(1)
        return real_hash(self, password, salt=salt)

    monkeypatch.setattr(PasswordHasher, "hash", counting)
    for _ in range(3):
        assert 401 == sign_in(browser, name="nobody").status_code
    assert 1 == len(hashes)


def test_a_csrf_token_outside_ascii_is_a_403_not_a_crash(shop, browser):
    """compare_digest refuses non-ASCII str: the check compares bytes."""
    sign_in(browser)
    answer = browser.post("/dlq/replay", data={"csrf": "é", "job": "x"})
    assert 403 == answer.status_code
    assert 403 == browser.post("/login", data={"csrf": "é", "name": "ann"}).status_code


@contextlib.contextmanager
def console_process(shop, *extra):
    """``saga console`` on a free port: (host, port); SIGTERM at the end."""
    url = shop.db.url.render_as_string(hide_password=False)
    command = [
        *(sys.executable, "-m", "saga", "console", "--port", "0", "--db", url),
        *("--sandbox-db", shop.services.sandbox_url, "--log-level", "error", *extra),
    ]
    with subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as server:
        try:
            first = server.stderr.readline()
            assert first.startswith("saga console: listening on http://"), first
            host, port = first.split()[-1].removeprefix("http://").split(":")
            yield host, int(port)
        finally:
            server.send_signal(signal.SIGTERM)
            assert 0 == server.wait(timeout=30)


def http(host, port, method, path, *, body=None, headers=None):
    connection = http_client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.getheaders(), answer.read().decode()
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "secure"), [((), False), (("--trusted-proxy", "127.0.0.1"), True)]
)
def test_the_session_cookie_is_secure_behind_a_trusted_tls_proxy(shop, extra, secure):
    """X-Forwarded-Proto is believed only from the proxy named; then the cookie is Secure."""
    with console_process(shop, *extra) as (host, port):
        _, headers, page = http(host, port, "GET", "/login")
        token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        login_cookie = next(v for k, v in headers if k == "Set-Cookie").split(";")[0]
        form = urlencode({"csrf": token, "name": "ann", "password": PASSWORD, "next": ""})
        status, headers, _ = http(
            host,
            port,
            "POST",
            "/login",
            body=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": login_cookie,
                "X-Forwarded-Proto": "https",
            },
        )
    assert 302 == status
    session = next(v for k, v in headers if k == "Set-Cookie" and SESSION_COOKIE in v)
    assert secure == ("Secure" in session)


@pytest.mark.slow
def test_a_body_over_the_limit_is_refused_before_it_is_read(shop):
    """413 from the declared length alone: the server does not wait for (or buffer) 500 MB."""
    with console_process(shop) as (host, port), socket.create_connection((host, port)) as conn:
        conn.settimeout(20)
        conn.sendall(
            b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 500000000\r\n\r\n"
        )
        first_line = conn.recv(200).split(b"\r\n")[0]
    assert b"413" in first_line


def test_money_received_by_transfer_is_recorded_with_its_amount_from_the_form(shop, browser):
    """External reference and amount, parsed in the purchase's currency as the CLI does."""
    purchase, item = unknown_payment(shop, "pm_timeout_before_charge")
    sign_in(browser)
    page = resolve(browser, item, "paid", external_ref="BANK-1", amount="10.00")
    assert "must be 49.00 EUR" in page.get_data(as_text=True)
    assert [] == rows(shop, "SELECT * FROM external_movements")
    item = shop.recon.show(item.id)[0]
    resolve(
        browser, item, "paid", reason="seen on the statement", external_ref="BANK-1", amount="49.00"
    )
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    (moved,) = rows(shop, "SELECT reference, amount_minor, operator FROM external_movements")
    assert {"reference": "BANK-1", "amount_minor": 4900, "operator": "ann"} == moved


def test_an_amount_without_an_external_reference_is_refused(shop, browser):
    """The amount is the external movement's: alone it means nothing, and nothing changes."""
    purchase, item = unknown_payment(shop, "pm_timeout_before_charge")
    sign_in(browser)
    page = resolve(browser, item, "not_paid", amount="49.00")
    assert "refused: amount" in page.get_data(as_text=True)
    assert "needs_reconciliation" == shop.services.purchases.get(purchase.id).state


def test_a_purchases_timeline_shows_the_provider_events_its_inbox_matched(shop, browser):
    """The application's own inbox (the purchase's provider events) is in the timeline too."""
    from saga.purchase.inbox import ProviderEvent

    purchase = shop.services.purchases.start(
        operation_id="op-9", intensive_id="js", student_id="s-9", payment_method="pm_ok"
    ).purchase
    kinds = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter).kinds()
    request = [k for k in kinds if k.name == "purchase.request_payment"]
    Worker(shop.db, Handlers(request), listen=False).run(burst=True)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    delivery = shop.services.inbox.deliver(
        ProviderEvent(
            event_id="evt_seen_1",
            type="payment.succeeded",
            payment_id=payment_id,
            amount_minor=4900,
            currency="EUR",
        ),
        source="sandbox",
    )
    assert purchase.id == delivery.saga_id
    sign_in(browser)
    page = browser.get(f"/sagas/{purchase.id}").get_data(as_text=True)
    assert "evt_seen_1" in page
    assert "payment.succeeded" in page
