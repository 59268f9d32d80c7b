"""
Money moved outside the provider is shown wherever a saga's money is (issue 21, item 3).

The reference, amount, operator and time of a bank transfer recorded by
``recon resolve --external-ref`` appear in ``saga purchase show`` (text and
JSON), ``saga recon show`` and the console's item and saga pages, beside the
expected, charged, refunded and held amounts formatted in their currency.
All of it comes through one seam, ``Application.money``; an application
without it shows no money.  Both backends.
"""

from __future__ import annotations

import pytest

from saga import Engine
from saga.cli import main
from saga.core.ops.operators import Operators
from saga.examples.approvals import app as approval_app
from saga.web import create_app
from tests import schemas
from tests.integration.test_console import PASSWORD, sign_in
from tests.purchases import cli_json, settle


@pytest.fixture
def refunded_by_hand(engine, db_url):
    """A declined refund paid back by transfer BANK-OUT-7: refunded, recorded outside."""
    engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
    purchase = engine.services.purchases.start(
        operation_id="op-1", intensive_id="js", student_id="s-1", payment_method="pm_refund_fails"
    ).purchase
    settle(db_url)
    engine.services.purchases.cancel(purchase.id, reason="student asked")
    settle(db_url)
    (item,) = engine.recon.find()
    engine.recon.resolve(
        item.id,
        outcome="refunded",
        operator="ann",
        reason="refunded by bank transfer",
        external_ref="BANK-OUT-7",
    )
    settle(db_url)
    assert "refunded" == engine.services.purchases.get(purchase.id).state
    return purchase, item


@pytest.mark.slow
def test_purchase_show_gives_the_transfer_in_json(refunded_by_hand, db_url, capsys):
    """Reference, amount (minor and formatted), operator, time; the totals with it."""
    purchase, _ = refunded_by_hand
    code, shown = cli_json(capsys, "purchase", "show", purchase.id, "--db", db_url)
    assert 0 == code
    money = shown["money"]
    (moved,) = money["external"]
    assert {
        "direction": "out",
        "reference": "BANK-OUT-7",
        "amount_minor": 4900,
        "amount": "49.00 EUR",
        "operator": "ann",
        "reason": "refunded by bank transfer",
    } == {k: v for k, v in moved.items() if k != "at"}
    assert moved["at"].endswith("Z")
    assert ("49.00 EUR", "49.00 EUR", "0.00 EUR", "0.00 EUR", 0) == (
        money["charged"],
        money["refunded"],
        money["expected"],
        money["held"],
        money["difference_minor"],
    )


@pytest.mark.slow
def test_purchase_show_and_recon_show_print_the_transfer(refunded_by_hand, db_url, capsys):
    """The text output names the reference, the amount, the operator and the time."""
    purchase, item = refunded_by_hand
    for argv in (("purchase", "show", purchase.id), ("recon", "show", item.id)):
        capsys.readouterr()
        assert 0 == main([*argv, "--db", db_url])
        text = capsys.readouterr().out
        line = next(x for x in text.splitlines() if "BANK-OUT-7" in x)
        assert "given back 49.00 EUR" in line
        assert "by ann at 20" in line
        assert "refunded:       49.00 EUR" in text
    _, shown = cli_json(capsys, "recon", "show", item.id, "--db", db_url)
    assert "BANK-OUT-7" == shown["money"]["external"][0]["reference"]


@pytest.mark.slow
def test_the_console_shows_the_transfer_on_the_item_and_the_saga(refunded_by_hand, engine):
    """Both pages: the money side by side, and the movement with its trace."""
    purchase, item = refunded_by_hand
    Operators(engine.db).add("ann", role="operator", password=PASSWORD)
    browser = create_app(engine, console=True).test_client()
    sign_in(browser)
    for path in (f"/recon/{item.id}", f"/sagas/{purchase.id}"):
        page = browser.get(path).get_data(as_text=True)
        assert "<code>BANK-OUT-7</code>" in page
        assert "given back" in page
        assert "refunded by bank transfer" in page
        assert '<td class="num">49.00 EUR</td>' in page
        assert "nothing kept: given back" in page


@pytest.mark.slow
def test_money_through_the_provider_only_says_so(engine, db_url, capsys):
    """No transfer: the totals, and 'none' outside the provider."""
    engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
    purchase = engine.services.purchases.start(
        operation_id="op-2", intensive_id="js", student_id="s-2", payment_method="pm_ok"
    ).purchase
    settle(db_url)
    capsys.readouterr()
    assert 0 == main(["purchase", "show", purchase.id, "--db", db_url])
    text = capsys.readouterr().out
    assert "expected:       49.00 EUR (the price (confirmed))" in text
    assert "difference:     0.00 EUR" in text
    assert "none (all of it through the provider)" in text


def test_an_application_without_money_shows_none(db_url):
    """The seam's default: no money card on the saga's page."""
    with Engine(db_url, app=approval_app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=approval_app) as engine:
        assert {} == engine.app.money(engine, ["any"])
        Operators(engine.db).add("ann", role="operator", password=PASSWORD)
        saga = engine.sagas.start("approval", operation_id="doc-1", request={"doc": "1"}).saga
        browser = create_app(engine, console=True).test_client()
        sign_in(browser)
        page = browser.get(f"/sagas/{saga.id}").get_data(as_text=True)
        assert "History" in page
        assert "<h2>Money</h2>" not in page
