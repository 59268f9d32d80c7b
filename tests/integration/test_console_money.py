"""
The console's money, queue columns, saga pages and outcomes (issue 21, items 20, 21, 22).

Amounts formatted in their currency side by side with the difference; the
queue's subject, money, age and deadline; the sagas list in pages with a
total; no outcome chosen in advance, each with when it fits.  Both backends.
"""

from __future__ import annotations

import re

import pytest

from saga.core.ops.operators import Operators
from saga.web import create_app
from tests.helpers import execute
from tests.integration.test_console import (
    PASSWORD,
    csrf_of,
    long_ago,
    resolve,
    sign_in,
    unknown_payment,
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


# -- the queue's columns, the sagas' pages --------------------------------------------


def test_the_queue_shows_money_student_age_and_deadline(shop, browser):
    """Each item: the price against the money held (formatted), who and what, age, deadline."""
    _, item = unknown_payment(shop)
    execute(shop, "UPDATE recon_items SET opened_at = :past", past=long_ago(shop))
    sign_in(browser)
    page = browser.get("/recon").get_data(as_text=True)
    assert "student s-1 · intensive js" in page
    assert "49.00 EUR / 0.00 EUR" in page  # the price; the checker has not seen the charge
    assert re.search(r">\d+ d \d+ h</td>", page)  # opened long ago, by the database clock
    assert re.search(r"in \d+ (min|h)", page)  # the deadline is ahead
    assert item.saga_id[:8] in page


def add_purchases(shop, count):
    shop.services.catalogue.add("big", seats=count, price="10.00", currency="EUR")
    return [
        shop.services.purchases.start(
            operation_id=f"op-p{n}", intensive_id="big", student_id=f"s{n}", payment_method="pm_ok"
        ).purchase.id
        for n in range(count)
    ]


def test_the_sagas_list_pages_with_a_total(shop, browser, monkeypatch):
    """A page at a time, newest first, the total counted; next and prev links walk every saga."""
    monkeypatch.setattr("saga.web.console.SAGAS_PER_PAGE", 2)
    made = add_purchases(shop, 5)
    sign_in(browser)
    seen, path = [], "/sagas?kind=purchase"
    for _ in range(3):
        page = browser.get(path).get_data(as_text=True)
        assert "5 sagas" in page
        seen += re.findall(r'href="/sagas/([0-9a-f-]{36})"', page)
        following = re.search(r'rel="next" href="([^"]+)"', page)
        if following is None:
            break
        path = following.group(1).replace("&amp;", "&")
    assert sorted(made) == sorted(dict.fromkeys(seen))
    assert "page 3 of 3" in page
    assert 'rel="prev"' in page
    assert 'rel="next"' not in page
    assert "refused: page" in browser.get("/sagas?page=0").get_data(as_text=True)
    assert "refused: kind" in browser.get("/sagas?kind=nope").get_data(as_text=True)


# -- money, formatted ------------------------------------------------------------------


def money_row(page):
    """The money card's figures, in order: expected, charged, refunded, held, difference."""
    card = page[page.index('<div class="card money">') :]
    row = card[card.index("</tr>") : card.index("</table>")]
    return re.findall(r"(-?\d+\.\d\d [A-Z]{3}|—)", row)


def test_the_item_page_sets_the_money_side_by_side_with_the_difference(shop, browser):
    """Expected against charged and refunded, in EUR; the evidence's 4900 reads 49.00 EUR."""
    purchase, item = unknown_payment(shop)
    sign_in(browser)
    page = browser.get(f"/recon/{item.id}").get_data(as_text=True)
    assert ["49.00 EUR", "0.00 EUR", "0.00 EUR", "0.00 EUR", "-49.00 EUR"] == money_row(page)
    assert "4900 = 49.00 EUR" in page
    assert "&#34;amount_minor&#34;: 4900," not in page
    resolve(browser, item, "paid")
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    page = browser.get(f"/sagas/{purchase.id}").get_data(as_text=True)
    assert ["49.00 EUR", "49.00 EUR", "0.00 EUR", "49.00 EUR", "0.00 EUR"] == money_row(page)


# -- outcomes: no default, a hint each -------------------------------------------------


def test_no_outcome_is_chosen_for_the_operator_and_each_says_when_it_fits(shop, browser):
    """Radio buttons, none checked; each outcome with its hint for the item's reason."""
    _, item = unknown_payment(shop)
    sign_in(browser)
    page = browser.get(f"/recon/{item.id}").get_data(as_text=True)
    radios = re.findall(r'<input type="radio" name="outcome" value="(\w+)"[^>]*>', page)
    assert ["paid", "not_paid", "refund", "refunded", "reviewed"] == radios
    assert "checked" not in "".join(re.findall(r'<input type="radio"[^>]*>', page))
    assert '<select name="outcome"' not in page
    assert "payment_outcome_unknown" in page
    assert "the provider shows a charge of the price" in page
    assert "the provider took no money" in page
    assert "only for review items" in page


def test_an_item_of_another_reason_gets_the_hints_of_that_reason(shop):
    """amount_mismatch: paid does not fit, refund does (the policy's hints by reason)."""
    policy = shop.recon.policy
    assert policy.hint("paid", "amount_mismatch").startswith("does not fit")
    assert policy.hint("refund", "amount_mismatch").startswith("fits")
    assert policy.hint("paid", "payment_outcome_unknown").startswith("the provider shows")


def test_a_decision_without_an_outcome_is_refused_and_changes_nothing(shop, browser):
    """The form posted with no outcome chosen (no default to fall back on): refused."""
    purchase, item = unknown_payment(shop)
    sign_in(browser)
    token = csrf_of(browser, f"/recon/{item.id}")
    answer = browser.post(
        f"/recon/{item.id}/resolve",
        data={"csrf": token, "version": str(item.version), "reason": "forgot to choose"},
        follow_redirects=True,
    )
    assert "refused: outcome" in answer.get_data(as_text=True)
    assert "open" == shop.recon.show(item.id)[0].status
    assert "needs_reconciliation" == shop.services.purchases.get(purchase.id).state
