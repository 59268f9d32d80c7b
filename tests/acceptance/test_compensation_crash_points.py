"""
The crash points of compensation, of a batch's completion and of webhook
delivery, on each backend: the process dies there, the next worker finishes
the work, the provider acted once, and every invariant holds.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from saga import Engine
from saga.core.faults import EXIT_CODE
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.examples.approvals import app as approval_app
from saga.ops import verify
from saga.purchase.faults import CRASH_POINTS
from saga.testing import run_due
from tests.helpers import engine_on, expire_lease, rows, wait_until

pytestmark = pytest.mark.timeout(120)


def _die_at(point, url, marker, app_name):
    os.environ["SAGA_CRASH_POINTS"] = point
    os.environ["SAGA_CRASH_MARKER"] = marker
    with Engine(url, app=approval_app if app_name == "approval" else None) as engine:
        deliver_and_run(engine)


def deliver_and_run(engine):
    """A burst of a worker that also delivers the provider's due webhooks."""
    worker = Worker(engine.db, builtin_handlers(engine), pollers=engine.pollers(), listen=False)
    worker.run(burst=True)


def crash(point, url, marker, app_name="purchase"):
    """Run the due work in a process that dies at ``point``; its exit code."""
    process = multiprocessing.get_context("forkserver").Process(
        target=_die_at, args=(point, url, marker, app_name)
    )
    process.start()
    process.join(timeout=60)
    return process.exitcode


def running_jobs(engine):
    return [row["id"] for row in rows(engine, "SELECT id FROM jobs WHERE state = 'running'")]


def recover(engine):
    """The dead worker's leases run out; the next worker finishes its work."""
    for job_id in running_jobs(engine):
        expire_lease(engine, job_id)
    if engine.app.name == "purchase":  # the provider retries what it was not answered
        with engine.services.sandbox.db.engine.begin() as conn:
            conn.execute(sa.text("UPDATE sandbox_webhooks SET lease_until = NULL"))
    deliver_and_run(engine)


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def start(shop, op, method="pm_ok"):
    return shop.services.purchases.start(
        operation_id=op, intensive_id="js", student_id=f"s-{op}", payment_method=method
    ).purchase


def settles_much_later(shop):
    """The sandbox's pending charges settle in a thousand years, not in a second."""
    later = (
        "2999-01-01T00:00:00.000Z" if shop.services.sandbox.db.dialect == "sqlite" else "2999-01-01"
    )
    with shop.services.sandbox.db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sandbox_charges SET created_at = :later WHERE status = 'pending'"),
            {"later": later},
        )


def ledger_of(shop, saga_id):
    ledger = shop.services.sandbox.ledger()
    return (
        [c["status"] for c in ledger["charges"] if c["reference"] == saga_id],
        [r["status"] for r in ledger["refunds"] if r["reference"] == saga_id],
    )


def test_every_crash_point_in_the_code_is_declared_and_every_declared_one_is_in_the_code():
    """The list the chaos harness draws from is the list the code reaches."""
    root = Path(__file__).resolve().parents[2]
    used = {
        name
        for folder in ("saga", "steps")
        for path in (root / folder).rglob("*.py")
        for name in re.findall(r'crash_point\("([a-z_.]+)"\)', path.read_text())
    }
    assert set(CRASH_POINTS) == used


@pytest.mark.slow
def test_killed_after_the_provider_cancelled_the_purchase_ends_cancelled_once(
    shop, db_url, tmp_path
):
    """Compensation: the provider cancelled the pending charge; the answer was lost."""
    # This method's charge stays pending a while (a second after it was made,
    # by the sandbox's clock): moved far ahead, it stays cancellable however
    # slowly the machine gets to the cancellation.
    purchase = start(shop, "op-1", method="pm_stale_failure_first")
    run_due(shop)
    settles_much_later(shop)
    assert "payment_pending" == shop.services.purchases.get(purchase.id).state
    shop.services.purchases.cancel(purchase.id, reason="changed plans", actor="student")
    assert EXIT_CODE == crash("cancel_payment.after_call", db_url, str(tmp_path / "m"))
    assert (["cancelled"], []) == ledger_of(shop, purchase.id)  # the provider did it
    recover(shop)
    assert "cancelled" == shop.services.purchases.get(purchase.id).state
    assert (["cancelled"], []) == ledger_of(shop, purchase.id)
    assert verify(shop).ok


@pytest.mark.slow
def test_killed_between_the_refund_intent_and_the_call_refunds_once(shop, db_url, tmp_path):
    """Compensation: the refund intent committed, the provider was never asked."""
    purchase = start(shop, "op-1")
    run_due(shop)
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    shop.services.purchases.cancel(purchase.id, reason="changed plans", actor="student")
    assert EXIT_CODE == crash("refund.before_call", db_url, str(tmp_path / "m"))
    assert (["succeeded"], []) == ledger_of(shop, purchase.id)
    recover(shop)
    assert "refunded" == shop.services.purchases.get(purchase.id).state
    assert (["succeeded"], ["succeeded"]) == ledger_of(shop, purchase.id)
    assert verify(shop).ok


@pytest.mark.slow
def test_killed_after_the_inbox_committed_a_webhook_its_redelivery_changes_nothing(
    shop, db_url, tmp_path
):
    """The sender was never answered: it sends again, and the inbox knows the event."""
    purchase = start(shop, "op-1")
    run_due(shop)  # confirmed by the provider's answer; its webhook follows shortly
    wait_until(lambda: (due := shop.services.sandbox.next_webhook_in()) is not None and due <= 0)
    assert EXIT_CODE == crash("webhook.after_inbox", db_url, str(tmp_path / "m"))
    assert 1 == len(rows(shop, "SELECT event_id FROM inbox"))
    recover(shop)
    assert (
        shop.services.sandbox.next_webhook_in() is None
    )  # delivered again, and answered this time
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    transitions = shop.sagas.history(purchase.id)
    assert ["start", "payment_requested", "payment_succeeded"] == [t.event for t in transitions]
    assert verify(shop).ok


@pytest.mark.slow
def test_killed_before_a_batch_completed_its_results_are_computed_again_once(db_url, tmp_path):
    """Results computed, the completion not committed: the jobs run again, complete once."""
    with engine_on(db_url, approval_app) as approvals:
        approvals.sagas.start("approval", operation_id="doc-1", request={})
        assert EXIT_CODE == crash(
            "worker.before_complete", db_url, str(tmp_path / "m"), app_name="approval"
        )
        assert 1 == len(running_jobs(approvals))
        recover(approvals)
        done = rows(
            approvals,
            "SELECT state, attempts FROM job_archive WHERE kind = :kind",
            kind="approval.notify_reviewer",
        )
        assert [{"state": "done", "attempts": 2}] == done
        assert verify(approvals).ok
