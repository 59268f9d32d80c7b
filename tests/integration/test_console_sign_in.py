"""
The console's sign-in throttle, its audit and the security headers (issue 21, items 27 and 22).

Failures counted per name and per client address by the database clock,
shared by every console process; the attempts shown to operators and pruned.
Both backends, through the WSGI application.
"""

from __future__ import annotations

import pytest

from saga.core.ops.operators import Operators
from saga.web import create_app
from tests.helpers import execute, rows
from tests.integration.test_console import (
    PASSWORD,
    long_ago,
    sign_in,
)

# Console tests sign in again and again: see the fixture.
pytestmark = pytest.mark.usefixtures("cheap_password_hashing")


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


# -- sign-in throttle and security headers --------------------------------------------


def attempts_of(shop, outcome):
    return rows(
        shop,
        "SELECT operator, address, attempts FROM sign_in_attempts WHERE outcome = :o ORDER BY id",
        o=outcome,
    )


@pytest.mark.slow
def test_thirty_wrong_passwords_then_the_right_one_is_refused_until_the_window_passes(
    shop, browser
):
    """Ten failures for a name in the window, then every attempt is 429 unchecked; audited."""
    answers = [sign_in(browser, password=f"guess-number-{n}").status_code for n in range(30)]
    assert [401] * 10 + [429] * 20 == answers
    refused = sign_in(browser)
    assert 429 == refused.status_code
    assert "too many failed sign-ins" in refused.get_data(as_text=True)
    assert "900" == refused.headers["Retry-After"]
    assert [] == rows(shop, "SELECT * FROM console_sessions")
    # The audit: ten refused rows, the throttled ones counted on one row.
    assert 10 == len(attempts_of(shop, "refused"))
    assert [{"operator": "ann", "address": "127.0.0.1", "attempts": 21}] == attempts_of(
        shop, "throttled"
    )
    # The database clock moves past the window: the right password opens a session.
    execute(
        shop, "UPDATE sign_in_attempts SET first_at = :past, last_at = :past", past=long_ago(shop)
    )
    assert 302 == sign_in(browser).status_code
    assert [{"operator": "ann", "address": "127.0.0.1", "attempts": 1}] == attempts_of(
        shop, "accepted"
    )


@pytest.mark.slow
def test_the_throttle_counts_failures_from_one_address_across_names(shop, monkeypatch):
    """Unknown names from one address up to its limit: ann is refused from there only."""
    from saga.core.ops.operators import Throttle

    monkeypatch.setattr("saga.core.ops.operators.Throttle", lambda: Throttle(per_address=5))
    attacker = create_app(shop, console=True).test_client()
    attacker.environ_base["REMOTE_ADDR"] = "203.0.113.9"
    answers = [sign_in(attacker, name=f"guess{n}").status_code for n in range(6)]
    assert [401] * 5 + [429] == answers
    assert 429 == sign_in(attacker).status_code
    colleague = create_app(shop, console=True).test_client()
    colleague.environ_base["REMOTE_ADDR"] = "198.51.100.7"
    assert 302 == sign_in(colleague).status_code


@pytest.mark.slow
def test_the_throttle_is_shared_by_every_console_process(shop):
    """Failures through one console application count in another on the same database."""
    first = create_app(shop, console=True).test_client()
    for n in range(10):
        assert 401 == sign_in(first, password=f"guess-number-{n}").status_code
    second = create_app(shop, console=True).test_client()
    assert 429 == sign_in(second).status_code


@pytest.mark.slow
def test_without_the_throttle_the_right_password_gets_in(shop, browser, monkeypatch):
    """The guard broken (a limit no one reaches): the test above would see the session."""
    from saga.core.ops.operators import Throttle

    monkeypatch.setattr("saga.core.ops.operators.Throttle", lambda: Throttle(per_operator=10**6))
    for n in range(11):
        sign_in(browser, password=f"guess-number-{n}")
    assert 302 == sign_in(browser).status_code


def test_sign_in_attempts_are_shown_to_operators(shop, browser):
    """The sign-ins page lists accepted, refused and throttled attempts, with their address."""
    sign_in(browser, name="nobody")
    sign_in(browser)
    page = browser.get("/sign-ins").get_data(as_text=True)
    assert "nobody" in page
    assert "refused" in page
    assert "accepted" in page
    assert "127.0.0.1" in page
    refused_only = browser.get("/sign-ins?outcome=refused").get_data(as_text=True)
    assert "accepted</span>" not in refused_only
    assert "refused: outcome" in browser.get(
        "/sign-ins?outcome=nope", follow_redirects=True
    ).get_data(as_text=True)


def test_old_sign_in_attempts_are_pruned_but_never_inside_the_window(shop, browser):
    """`saga prune` removes attempts past its window; a short one never lifts a throttle."""
    from saga.core.ops.prune import Pruner

    sign_in(browser, password="not-the-password")
    sign_in(browser, password="not-the-password-again")
    assert 0 == Pruner(shop.db, older_than_s=0).run().pruned["sign_ins"]
    execute(
        shop,
        "UPDATE sign_in_attempts SET first_at = :past, last_at = :past WHERE id = "
        "(SELECT min(id) FROM sign_in_attempts)",
        past=long_ago(shop),
    )
    assert 1 == Pruner(shop.db, older_than_s=86400).run().pruned["sign_ins"]
    assert 1 == len(rows(shop, "SELECT * FROM sign_in_attempts"))


@pytest.mark.parametrize(
    "path", ["/login", "/", "/recon", "/sagas/nope", "/console-static/console.css"]
)
def test_every_console_response_carries_the_security_headers(shop, browser, path):
    """No framing, no inline script, no referrer, no sniffing: signed in or not, found or not."""
    if path != "/login":
        sign_in(browser)
    answer = browser.get(path)
    answer.close()
    csp = answer.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp
    assert "default-src 'none'" in csp
    assert "DENY" == answer.headers["X-Frame-Options"]
    assert "no-referrer" == answer.headers["Referrer-Policy"]
    assert "nosniff" == answer.headers["X-Content-Type-Options"]


def test_saga_operator_sign_ins_lists_the_attempts(shop, browser, capsys):
    """The CLI's audit of the throttle: refused and accepted, with the address; bad input exit 2."""
    import json

    from saga.cli import main

    sign_in(browser, password="not-the-password")
    sign_in(browser)
    capsys.readouterr()
    url = shop.db.url.render_as_string(hide_password=False)
    assert 0 == main(["operator", "sign-ins", "--json", "--db", url])
    listed = json.loads(capsys.readouterr().out)
    assert [("accepted", "127.0.0.1"), ("refused", "127.0.0.1")] == [
        (a["outcome"], a["address"]) for a in listed
    ]
    assert 0 == main(["operator", "sign-ins", "--outcome", "refused", "--db", url])
    assert "accepted" not in capsys.readouterr().out
    assert 2 == main(["operator", "sign-ins", "--limit", "0", "--db", url])


@pytest.mark.slow
def test_concurrent_wrong_passwords_reach_the_check_at_most_the_limit(shop):
    """Twelve at once (threads, one database): at most the limit are checked, the rest throttled."""
    import threading

    from saga.core.ops.operators import SignInThrottled, Throttle

    accounts = Operators(shop.db, throttle=Throttle(per_operator=3))
    outcomes = []

    def attempt(n):
        try:
            outcomes.append(accounts.sign_in("ann", f"guess-number-{n}", address="192.0.2.5"))
        except SignInThrottled:
            outcomes.append("throttled")

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 12 == len(outcomes)
    checked = [o for o in outcomes if o != "throttled"]
    assert 1 <= len(checked) <= 3
    assert len(checked) == len(attempts_of(shop, "refused"))
    assert [] == attempts_of(shop, "pending")


def test_the_audit_keeps_a_bounded_printable_name(shop):
    """A name typed by anyone: 64 characters at most, a terminal's escape codes made harmless."""
    accounts = Operators(shop.db)
    assert accounts.sign_in("\x1b[2J" + "x" * 500, "whatever-password", address="192.0.2.9") is None
    (attempt,) = accounts.attempts()
    assert "?[2J" + "x" * 60 == attempt["operator"]
