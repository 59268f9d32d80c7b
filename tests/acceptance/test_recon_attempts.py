"""
The look that settles an item counts as an attempt (issue 21, item 16).

An item the checker settled on its first look read ``0/N`` in ``recon list``
and the console, as if nothing had looked at it.  Both backends.
"""

from __future__ import annotations

import pytest

from saga.core.queue.leases import Queue
from tests.acceptance.test_reconciliation import checker_job, checker_of, run_steps_once, start
from tests.helpers import make_due
from tests.purchases import cli_json


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


@pytest.fixture
def unknown(shop):
    """A purchase whose payment call timed out after charging: an open checker item."""
    purchase = start(shop, "op-1", "pm_timeout_after_charge")
    run_steps_once(shop)
    return shop.services.purchases.get(purchase.id)


def test_an_item_settled_on_the_first_look_reads_one_attempt(shop, unknown, db_url, capsys):
    """Resolved by the checker's first check: 1 attempt, in the API, the CLI and its audit."""
    item, job = checker_job(shop, unknown)
    owned, result = Queue(shop.db).complete_with(job, checker_of(shop).reconcile(job).apply)
    assert (True, {"resolved": "paid", "attempts": 1}) == (owned, result)
    settled = shop.recon.show(item.id)[0]
    assert ("resolved", 1) == (settled.status, settled.attempts)
    _, listed = cli_json(capsys, "recon", "list", "--status", "all", "--db", db_url)
    assert [1] == [entry["attempts"] for entry in listed]


def test_an_item_settled_on_the_second_look_reads_two(shop, unknown, monkeypatch):
    """A first look the provider does not answer (counted, settles nothing), then one that does."""
    item, job = checker_job(shop, unknown)
    answers = shop.services.sandbox.payment_status

    def down(**_):
        raise ConnectionError("provider unreachable")

    monkeypatch.setattr(shop.services.sandbox, "payment_status", down)
    Queue(shop.db).complete_with(job, checker_of(shop).reconcile(job).apply)
    looked = shop.recon.show(item.id)[0]
    assert ("open", 1) == (looked.status, looked.attempts)
    monkeypatch.setattr(shop.services.sandbox, "payment_status", answers)
    make_due(shop, f"recon:{item.id}:1")
    (job,) = Queue(shop.db).claim(["purchase.reconcile"], batch=1)
    Queue(shop.db).complete_with(job, checker_of(shop).reconcile(job).apply)
    settled = shop.recon.show(item.id)[0]
    assert ("resolved", 2) == (settled.status, settled.attempts)
