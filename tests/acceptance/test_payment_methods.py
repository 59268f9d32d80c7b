"""
Every sandbox payment method, driven through the CLI to its expected end
state, with `saga verify` green, on SQLite and on PostgreSQL.

One scenario per backend (module scope): start one purchase per method,
work until nothing is due, cancel the purchases whose refund is under test,
work again; then one test per method checks where it ended.
"""

from __future__ import annotations

import pytest

from saga import Engine
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import execute, make_due
from tests.purchases import cli, settle

EXPECTED = {
    "pm_ok": "confirmed",
    "pm_declined": "cancelled",
    "pm_timeout_after_charge": "confirmed",
    "pm_timeout_before_charge": "cancelled",
    "pm_late": "refunded",
    "pm_amount_mismatch": "needs_reconciliation",
    "pm_duplicate_webhooks": "confirmed",
    "pm_out_of_order_webhooks": "confirmed",
    "pm_refund_fails": "needs_reconciliation",
    "pm_refund_timeout": "refunded",
    "pm_stale_failure_first": "confirmed",
}
CANCELLED_AFTER_PAYING = ("pm_refund_fails", "pm_refund_timeout")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def scenario(request, tmp_path_factory):
    if request.param == "postgres":
        require_postgres()
        schema = PostgresSchema()
        url, cleanup = schema.url, schema.drop
    else:
        url, cleanup = f"sqlite:///{tmp_path_factory.mktemp('methods')}/saga.db", lambda: None
    try:
        yield _run(url)
    finally:
        cleanup()


def expire_hold(engine, saga_id):
    """Move the database clock past one purchase's hold: its deadline and its timer."""
    saga = engine.sagas.get(saga_id)
    if saga.deadline_event != "hold_expired":
        return
    past = "2000-01-01T00:00:00.000Z" if engine.db.dialect == "sqlite" else "2000-01-01T00:00:00Z"
    execute(engine, "UPDATE sagas SET deadline_at = :past WHERE id = :id", past=past, id=saga_id)
    make_due(engine, f"timer:{saga_id}:{saga.version}")


def _run(url):
    import io
    import json
    from contextlib import redirect_stdout

    def saga(*argv):
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            code = cli(*argv, "--db", url, "--json")
        return code, (json.loads(buffer.getvalue()) if buffer.getvalue().strip() else None)

    assert 0 == saga("db", "upgrade")[0]
    assert (
        0
        == saga("intensive", "add", "js", "--seats", "20", "--price", "49.00", "--currency", "EUR")[
            0
        ]
    )
    ids = {}
    for method in EXPECTED:
        code, purchase = saga(
            "purchase",
            "start",
            "--operation-id",
            f"op-{method}",
            "--intensive",
            "js",
            "--student",
            f"s-{method}",
            "--payment-method",
            method,
            "--hold-seconds",
            "600",
        )
        assert 0 == code
        ids[method] = purchase["id"]
    settle(url)
    # The holds run out by the database clock, not by waiting: whatever still
    # waits for its payment (pm_late) meets its expiry now, however slow the machine.
    with Engine(url) as engine:
        for saga_id in ids.values():
            expire_hold(engine, saga_id)
    settle(url)
    for method in CANCELLED_AFTER_PAYING:
        code, purchase = saga("purchase", "cancel", ids[method], "--reason", "student asked")
        assert (0, "refund_pending") == (code, purchase["state"])
    settle(url)
    purchases = {method: saga("purchase", "show", ids[method])[1] for method in EXPECTED}
    verify_code, verdict = saga("verify")
    _, ledger = saga("sandbox", "ledger")
    _, items = saga("recon", "list", "--status", "all")
    return {
        "url": url,
        "purchases": purchases,
        "verify": (verify_code, verdict),
        "ledger": ledger,
        "items": items,
    }


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_method_reaches_its_end_state(scenario, method):
    """Each payment method ends where the design says it should."""
    assert EXPECTED[method] == scenario["purchases"][method]["state"]


@pytest.mark.slow
def test_verify_is_green_after_every_method(scenario):
    """`saga verify` exits 0 with every invariant holding."""
    code, verdict = scenario["verify"]
    broken = [i for i in verdict["invariants"] if i["violations"]]
    assert (0, True, []) == (code, verdict["ok"], broken)


@pytest.mark.slow
def test_timeouts_are_settled_by_the_checker_not_by_guessing(scenario):
    """Both timeouts went through reconciliation; the checker decided from the provider."""
    for method, outcome in (
        ("pm_timeout_after_charge", "paid"),
        ("pm_timeout_before_charge", "not_paid"),
    ):
        item = scenario["purchases"][method]["reconciliation"]
        assert item is not None
        resolved = next(i for i in scenario["items"] if i["id"] == item["id"])
        assert ("resolved", outcome, "checker") == (
            resolved["status"],
            resolved["resolution"],
            resolved["resolved_by"],
        )


@pytest.mark.slow
def test_one_charge_per_purchase_whatever_the_method(scenario):
    """The ledger never holds two successful charges for one purchase."""
    references = [
        c["reference"] for c in scenario["ledger"]["charges"] if c["status"] == "succeeded"
    ]
    assert len(references) == len(set(references))


@pytest.mark.slow
def test_refund_that_fails_is_never_a_silent_refunded(scenario):
    """A declined refund leaves the purchase in reconciliation with a human owner."""
    purchase = scenario["purchases"]["pm_refund_fails"]
    assert "refunded" not in [h["to"] for h in purchase["history"]]
    assert ("refund_declined", "operators", "open") == (
        purchase["reconciliation"]["reason"],
        purchase["reconciliation"]["owner"],
        purchase["reconciliation"]["status"],
    )
    assert "failed" == purchase["refund"]["status"]


@pytest.mark.slow
def test_refund_that_timed_out_is_confirmed_by_the_checker(scenario):
    """A refund call that timed out is settled by asking the provider: one refund."""
    purchase = scenario["purchases"]["pm_refund_timeout"]
    history = [h["to"] for h in purchase["history"]]
    assert ["needs_reconciliation", "refunded"] == history[-2:]
    refunds = [r for r in scenario["ledger"]["refunds"] if r["reference"] == purchase["id"]]
    assert 1 == len(refunds)


@pytest.mark.slow
def test_late_payment_after_expiry_is_refunded_once(scenario):
    """pm_late: expired first, the late success becomes exactly one refund."""
    purchase = scenario["purchases"]["pm_late"]
    states = [h["to"] for h in purchase["history"]]
    assert ["expired", "refund_pending", "refunded"] == states[-3:]
    assert "free" == purchase["seat"]
    refunds = [r for r in scenario["ledger"]["refunds"] if r["reference"] == purchase["id"]]
    assert ["succeeded"] == [r["status"] for r in refunds]


@pytest.mark.slow
def test_mismatched_amount_waits_for_an_operator_with_evidence(scenario):
    """Another amount charged: reconciliation, owned by operators, the amounts in evidence."""
    purchase = scenario["purchases"]["pm_amount_mismatch"]
    item = next(i for i in scenario["items"] if i["id"] == purchase["reconciliation"]["id"])
    opened = item["evidence"]["opened_by"]["payload"]
    assert ("amount_mismatch", "operators") == (item["reason"], item["owner"])
    assert opened["amount_minor"] != item["evidence"]["expected"]["amount_minor"]
