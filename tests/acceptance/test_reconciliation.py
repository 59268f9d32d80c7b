"""The reconciliation queue: operators, the checker, stale and contradicted decisions."""

from __future__ import annotations

import pytest

from saga.core.queue.leases import Queue
from saga.core.recon.items import ContradictedDecision, StaleDecision
from saga.exceptions import InvalidInput, NotFound
from saga.purchase.recon import PURCHASE_RECON, payment_checker
from saga.purchase.steps import PurchaseSteps
from tests.helpers import dump, make_due
from tests.purchases import cli_json, settle


def steps_of(engine):
    return PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter)


def checker_of(engine):
    return payment_checker(
        engine.db, engine.registry, engine.services.provider_getter, PURCHASE_RECON
    )


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def start(engine, op, method):
    return engine.services.purchases.start(
        operation_id=op, intensive_id="js", student_id=op, payment_method=method, hold_seconds=60
    ).purchase


def run_steps_once(engine):
    """Run the request step (not the checker) so the item stays open for the test."""
    from saga.core.queue.kinds import Handlers
    from saga.core.workers.worker import Worker

    kinds = [k for k in steps_of(engine).kinds() if k.name == "purchase.request_payment"]
    Worker(engine.db, Handlers(kinds), listen=False).run(burst=True)


@pytest.fixture
def unknown(shop):
    """A purchase whose payment call timed out after charging: an open checker item."""
    purchase = start(shop, "op-1", "pm_timeout_after_charge")
    run_steps_once(shop)
    after = shop.services.purchases.get(purchase.id)
    assert "needs_reconciliation" == after.state
    return after


def checker_job(engine, purchase):
    item = engine.recon.find()[0]
    job_id = f"recon:{item.id}:0"
    make_due(engine, job_id)
    (job,) = Queue(engine.db).claim(["purchase.reconcile"], batch=1)
    return item, job


def events_of(engine, item_id):
    _, events = engine.recon.show(item_id)
    return [(e["actor"], e["action"]) for e in events]


def test_item_opens_with_owner_next_check_and_evidence(shop, unknown):
    """The unknown outcome opened one item: checker-owned, due soon, with what was sent."""
    item = shop.recon.find()[0]
    assert (unknown.id, "checker", "payment_outcome_unknown", 0) == (
        item.saga_id,
        item.owner,
        item.reason,
        item.attempts,
    )
    assert item.next_check_at is not None
    assert item.deadline > item.next_check_at
    assert "sent" in item.evidence["opened_by"]["payload"]["evidence"]


def test_operator_first_then_the_checker_loses_on_the_record(shop, unknown):
    """The operator resolves while a check is in flight: the check is discarded, both audited."""
    item, job = checker_job(shop, unknown)
    pending_check = checker_of(shop).reconcile(job)  # the checker asked the provider...
    shop.recon.resolve(item.id, outcome="paid", operator="ann", reason="bank statement shows it")
    owned, result = Queue(shop.db).complete_with(job, pending_check.apply)  # ...and lands late
    assert (True, {"discarded": True}) == (owned, result)
    assert "confirmed" == shop.services.purchases.get(unknown.id).state
    assert [
        ("worker", "opened"),
        ("operator:ann", "resolved"),
        ("checker", "check_discarded"),
    ] == events_of(shop, item.id)


def test_checker_first_then_the_operator_is_refused_on_the_record(shop, unknown):
    """The checker settles first: the operator's decision on the old version is refused."""
    item, job = checker_job(shop, unknown)
    Queue(shop.db).complete_with(job, checker_of(shop).reconcile(job).apply)
    with pytest.raises(StaleDecision):
        shop.recon.resolve(
            item.id,
            outcome="not_paid",
            operator="ann",
            reason="no money seen",
            expected_version=item.version,
        )
    assert "confirmed" == shop.services.purchases.get(unknown.id).state
    assert [
        ("worker", "opened"),
        ("checker", "resolved"),
        ("operator:ann", "refused"),
    ] == events_of(shop, item.id)


def test_decision_contradicting_the_provider_is_refused(shop, unknown):
    """The provider holds the charge: "not paid" is refused, nothing changes, audited."""
    item = shop.recon.find()[0]
    shop.recon.assign(item.id, operator="ann")
    before = dump(shop)
    with pytest.raises(ContradictedDecision, match="money was taken"):
        shop.recon.resolve(item.id, outcome="not_paid", operator="ann", reason="looks unpaid")
    after = dump(shop)
    assert before["sagas"] == after["sagas"]
    assert before["payments"] == after["payments"]
    assert "refused" == events_of(shop, item.id)[-1][1]


def test_assign_takes_the_item_from_the_checker(shop, unknown):
    """An assigned item is the operator's: the checker leaves it alone."""
    item, job = checker_job(shop, unknown)
    shop.recon.assign(item.id, operator="bob")
    result = checker_of(shop).reconcile(job)
    assert "owned by bob" in result["skipped"]


def test_bad_resolutions_are_refused_before_anything(shop, unknown):
    """Unknown outcome, missing reason, unknown item: clear errors."""
    item = shop.recon.find()[0]
    with pytest.raises(InvalidInput) as bad:
        shop.recon.resolve(item.id, outcome="maybe", operator="ann", reason="r")
    assert "outcome" == bad.value.field
    with pytest.raises(InvalidInput):
        shop.recon.resolve(item.id, outcome="paid", operator="ann", reason="  ")
    with pytest.raises(NotFound):
        shop.recon.resolve("rec_nope", outcome="paid", operator="ann", reason="r")


class TestCli:
    def test_list_show_and_resolve(self, shop, unknown, db_url, capsys):
        """recon list/show/resolve speak the contract's JSON and exit codes."""
        code, items = cli_json(capsys, "recon", "list", "--db", db_url)
        assert 0 == code
        fields = {
            "id",
            "saga_id",
            "status",
            "reason",
            "evidence",
            "owner",
            "next_check_at",
            "attempts",
            "deadline",
        }
        assert fields <= set(items[0])
        item_id = items[0]["id"]
        code, shown = cli_json(capsys, "recon", "show", item_id, "--db", db_url)
        assert (0, "opened") == (code, shown["events"][0]["action"])
        code, resolved = cli_json(
            capsys,
            "recon",
            "resolve",
            item_id,
            "--outcome",
            "paid",
            "--operator",
            "ann",
            "--reason",
            "seen at the bank",
            "--db",
            db_url,
        )
        assert (0, "resolved", "confirmed") == (
            code,
            resolved["status"],
            resolved["purchase_state"],
        )

    def test_stale_version_exits_3(self, shop, unknown, db_url, capsys):
        """--version of an older read is a conflict."""
        item = shop.recon.find()[0]
        shop.recon.assign(item.id, operator="bob")
        code, _ = cli_json(
            capsys,
            "recon",
            "resolve",
            item.id,
            "--outcome",
            "paid",
            "--operator",
            "ann",
            "--reason",
            "r",
            "--version",
            str(item.version),
            "--db",
            db_url,
        )
        assert 3 == code

    def test_unknown_item_exits_4_and_bad_outcome_exits_2(self, shop, unknown, db_url, capsys):
        """Not found is 4; an outcome outside paid|not_paid|refund is 2."""
        assert 4 == cli_json(capsys, "recon", "show", "rec_nope", "--db", db_url)[0]
        item = shop.recon.find()[0]
        assert (
            2
            == cli_json(
                capsys,
                "recon",
                "resolve",
                item.id,
                "--outcome",
                "maybe",
                "--operator",
                "ann",
                "--reason",
                "r",
                "--db",
                db_url,
            )[0]
        )


@pytest.mark.slow
def test_verify_exits_1_when_an_invariant_breaks(shop, db_url, capsys):
    """A purchase whose seat row lies about its state breaks two invariants: exit 1."""
    start(shop, "op-1", "pm_ok")
    settle(db_url)
    assert 0 == cli_json(capsys, "verify", "--db", db_url)[0]
    shop.db.transaction(lambda tx: tx.execute_sql("UPDATE purchases SET seat = 'held'"))
    code, verdict = cli_json(capsys, "verify", "--db", db_url)
    broken = {i["name"] for i in verdict["invariants"] if i["violations"]}
    assert (1, False) == (code, verdict["ok"])
    assert {"seats", "seat_follows_state"} == broken


def test_not_paid_is_refused_when_the_provider_already_reported_the_charge(shop, unknown):
    """A success webhook recorded before any check is evidence enough: "not paid" is refused."""
    from saga.purchase.inbox import ProviderEvent

    charge = shop.services.sandbox.payment_status(key=f"pay:{unknown.id}")
    shop.services.inbox.deliver(
        ProviderEvent(
            event_id="evt-1",
            type="payment.succeeded",
            payment_id=charge.payment_id,
            amount_minor=4900,
            currency="EUR",
            reference=unknown.id,
        )
    )
    item = shop.recon.find()[0]
    with pytest.raises(ContradictedDecision, match="money was taken"):
        shop.recon.resolve(item.id, outcome="not_paid", operator="ann", reason="no money seen")
    assert "needs_reconciliation" == shop.services.purchases.get(unknown.id).state


@pytest.mark.slow
def test_declined_refund_can_be_settled_as_refunded_by_hand(shop, db_url):
    """A refund the provider declines for good is settled by an operator who paid it back."""
    purchase = start(shop, "op-1", "pm_refund_fails")
    settle(db_url)
    shop.services.purchases.cancel(purchase.id, reason="student asked")
    settle(db_url)
    item = shop.recon.find()[0]
    assert "refund_declined" == item.reason
    with pytest.raises(ContradictedDecision):
        shop.recon.resolve(item.id, outcome="paid", operator="ann", reason="r")
    with pytest.raises(ContradictedDecision, match="external-ref"):
        shop.recon.resolve(item.id, outcome="refunded", operator="ann", reason="no trace given")
    shop.recon.resolve(
        item.id,
        outcome="refunded",
        operator="ann",
        reason="paid back by bank transfer, ticket 881",
        external_ref="BANK-881",
    )
    assert "refunded" == shop.services.purchases.get(purchase.id).state


def test_dlq_replay_of_an_unknown_job_exits_4(shop, db_url, capsys):
    """Replaying a job id that was never accepted is not found."""
    assert 4 == cli_json(capsys, "dlq", "replay", "--job", "nope", "--db", db_url)[0]
