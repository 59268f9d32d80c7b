"""Contract: accepting purchases and moving them, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from saga import Engine, Machine, State, Transition, fire_in
from saga.core.engine import default_registry
from saga.exceptions import (
    DuplicatePurchase,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    SoldOut,
    TransitionNotAllowed,
    VersionConflict,
)
from saga.sagas import RECONCILIATION, TIMER
from tests.helpers import dump, rows, scalar

PAID = {"amount_minor": 4990, "currency": "EUR"}


@pytest.fixture
def intensive(engine):
    intensive, _ = engine.services.catalogue.add("js-101", seats=2, price="49.90", currency="EUR")
    return intensive


def start(engine, op, student, **kwargs):
    return engine.services.purchases.start(
        operation_id=op, intensive_id="js-101", student_id=student, **kwargs
    )


def reconcile(engine, saga_id, event, **kwargs):
    """A reconciliation outcome, fired as the reconciliation queue fires it (its own door)."""
    return engine.db.transaction(
        lambda tx: fire_in(
            tx,
            engine.registry,
            saga_id,
            event,
            payload={},
            actor="operator:ann",
            cause=kwargs.get("cause"),
            origin=RECONCILIATION,
        )
    )


def seats(engine):
    seats = engine.services.catalogue.get("js-101").to_json()["seats"]
    return seats["held"], seats["taken"], seats["free"]


class TestAcceptance:
    def test_new_operation_holds_a_seat_in_reserved(self, engine, intensive):
        """A new operation id creates the saga in reserved and holds one seat."""
        result = start(engine, "op-1", "s1")
        assert result.created
        assert ("reserved", "held", 1) == (
            result.purchase.state,
            result.purchase.seat,
            result.purchase.version,
        )
        assert (1, 0, 1) == seats(engine)

    def test_the_reply_to_a_new_purchase_is_what_reading_it_back_gives(self, engine, intensive):
        """The reply is built without a read: it must equal the stored purchase, field by field."""
        created = start(engine, "op-1", "s1", payment_method="pm_ok", hold_seconds=90).purchase
        assert engine.services.purchases.get(created.id).to_json() == created.to_json()

    def test_the_reply_to_a_repeated_request_is_the_stored_purchase(self, engine, intensive):
        """The same operation again: read back, and equal to the first reply."""
        first = start(engine, "op-1", "s1").purchase
        again = start(engine, "op-1", "s1")
        assert not again.created
        assert first.to_json() == again.purchase.to_json()

    def test_acceptance_writes_audit_timer_and_payment_request_together(self, engine, intensive):
        """The saga row, its audit row, its hold timer and its first step are all there."""
        purchase = start(engine, "op-1", "s1", hold_seconds=60).purchase
        assert [("start", None, "reserved")] == [
            (h.event, h.from_state, h.to_state) for h in purchase.history
        ]
        jobs = rows(
            engine, "SELECT kind, available_at FROM jobs WHERE saga_id = :id", id=purchase.id
        )
        assert {"saga.timeout", "purchase.request_payment"} == {job["kind"] for job in jobs}

    def test_hold_deadline_comes_from_the_database_clock(self, engine, intensive):
        """deadline = creation time + hold seconds, both measured by the database."""
        purchase = start(engine, "op-1", "s1", hold_seconds=120).purchase
        assert "hold_expired" == purchase.deadline_event
        assert timedelta(seconds=120) == purchase.deadline_at - purchase.created_at

    def test_same_operation_same_payload_returns_the_same_saga(self, engine, intensive):
        """A retried request gets the saga it created, and nothing else changes."""
        first = start(engine, "op-1", "s1")
        before = dump(engine)
        again = start(engine, "op-1", "s1")
        assert (first.purchase.id, False) == (again.purchase.id, again.created)
        assert first.purchase.to_json() == again.purchase.to_json()
        assert before == dump(engine)

    @pytest.mark.parametrize(
        "change",
        [
            {"student": "s2"},
            {"payment_method": "pm_declined"},
            {"hold_seconds": 60},
        ],
    )
    def test_same_operation_other_payload_conflicts_and_changes_nothing(
        self, engine, intensive, change
    ):
        """Reusing an operation id for another request names the id and writes nothing."""
        start(engine, "op-1", "s1")
        before = dump(engine)
        change = dict(change)
        student = change.pop("student", "s1")
        with pytest.raises(IdempotencyConflict) as info:
            start(engine, "op-1", student, **change)
        assert "op-1" == info.value.operation_id
        assert before == dump(engine)

    def test_sold_out_is_refused_and_changes_nothing(self, engine, intensive):
        """With every seat held, a new purchase is refused and nothing is written."""
        start(engine, "op-1", "s1")
        start(engine, "op-2", "s2")
        before = dump(engine)
        with pytest.raises(SoldOut):
            start(engine, "op-3", "s3")
        assert before == dump(engine)

    def test_sold_out_operation_id_can_be_retried_later(self, engine, intensive):
        """A refused acceptance claimed nothing: the same id succeeds once a seat is free."""
        first = start(engine, "op-1", "s1").purchase
        start(engine, "op-2", "s2")
        with pytest.raises(SoldOut):
            start(engine, "op-3", "s3")
        engine.sagas.fire(first.id, "payment_failed", actor="test")
        assert start(engine, "op-3", "s3").created

    def test_unknown_intensive_is_not_found_and_changes_nothing(self, engine, intensive):
        """Buying a seat of an intensive that does not exist is "not found" (exit 4)."""
        before = dump(engine)
        with pytest.raises(NotFound) as info:
            engine.services.purchases.start(
                operation_id="op-1", intensive_id="nope", student_id="s1"
            )
        assert ("intensive", "nope") == (info.value.kind, info.value.key)
        assert before == dump(engine)

    def test_one_live_seat_per_student(self, engine, intensive):
        """A student holding a seat cannot hold a second one of the same intensive."""
        start(engine, "op-1", "s1")
        before = dump(engine)
        with pytest.raises(DuplicatePurchase):
            start(engine, "op-2", "s1")
        assert before == dump(engine)

    def test_student_may_buy_again_after_the_seat_was_freed(self, engine, intensive):
        """Once a purchase freed its seat, the student may start a new one."""
        first = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(first.id, "payment_failed", actor="test")
        assert start(engine, "op-2", "s1").created

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"operation_id": ""}, "operation_id"),
            ({"operation_id": "x" * 129}, "operation_id"),
            ({"student_id": ""}, "student_id"),
            ({"payment_method": "pm_bitcoin"}, "payment_method"),
            ({"hold_seconds": 0}, "hold_seconds"),
        ],
    )
    def test_bad_input_names_the_field_and_changes_nothing(self, engine, intensive, kwargs, field):
        """Malformed requests are refused before anything is written."""
        before = dump(engine)
        values = {"operation_id": "op", "intensive_id": "js-101", "student_id": "s1", **kwargs}
        with pytest.raises(InvalidInput) as info:
            engine.services.purchases.start(**values)
        assert field == info.value.field
        assert before == dump(engine)


class TestTransitions:
    def test_transition_moves_state_version_seat_and_audits(self, engine, intensive):
        """One event: state and version move, the seat follows, an audit row appears."""
        purchase = start(engine, "op-1", "s1").purchase
        fired = engine.sagas.fire(
            purchase.id, "payment_succeeded", payload=PAID, actor="provider", cause="webhook evt-1"
        )
        assert ("confirmed", 2) == (fired.saga.state, fired.saga.version)
        assert (0, 1, 1) == seats(engine)
        last = engine.services.purchases.get(purchase.id).history[-1]
        assert ("reserved", "confirmed", "payment_succeeded", "provider", "webhook evt-1") == (
            last.from_state,
            last.to_state,
            last.event,
            last.actor,
            last.cause,
        )

    def test_leaving_a_timed_state_drops_its_timer(self, engine, intensive):
        """A state without timeout has no deadline and no pending timer."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="test")
        after = engine.services.purchases.get(purchase.id)
        assert (None, None) == (after.deadline_at, after.deadline_event)
        assert 0 == scalar(
            engine,
            "SELECT count(*) FROM jobs WHERE saga_id = :id AND kind = 'saga.timeout'",
            id=purchase.id,
        )

    def test_payment_pending_keeps_the_hold_deadline_of_creation(self, engine, intensive):
        """The hold is measured from creation: moving to payment_pending keeps the deadline."""
        purchase = start(engine, "op-1", "s1", hold_seconds=300).purchase
        fired = engine.sagas.fire(purchase.id, "payment_requested", actor="test")
        assert purchase.deadline_at == fired.saga.deadline_at
        timers = rows(
            engine,
            "SELECT id, available_at FROM jobs WHERE saga_id = :id AND kind = 'saga.timeout'",
            id=purchase.id,
        )
        assert [f"timer:{purchase.id}:2"] == [timer["id"] for timer in timers]

    def test_stale_version_is_refused_and_changes_nothing(self, engine, intensive):
        """A decision made on an old version is a conflict, never applied."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_requested", actor="test")
        before = dump(engine)
        with pytest.raises(VersionConflict) as info:
            engine.sagas.fire(purchase.id, "cancel", actor="op", expected_version=1)
        assert (1, 2) == (info.value.expected_version, info.value.actual_version)
        assert before == dump(engine)

    def test_undeclared_transition_is_refused_and_changes_nothing(self, engine, intensive):
        """reserved cannot be refunded: refused, with nothing written."""
        purchase = start(engine, "op-1", "s1").purchase
        before = dump(engine)
        with pytest.raises(TransitionNotAllowed):
            engine.sagas.fire(purchase.id, "refund_succeeded", actor="test")
        assert before == dump(engine)

    def test_terminal_state_absorbs_and_writes_nothing(self, engine, intensive):
        """A duplicate event on a final purchase is absorbed: no version, no audit row."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="test")
        before = dump(engine)
        fired = engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="test")
        assert fired.absorbed
        assert before == dump(engine)

    def test_late_payment_after_expiry_refunds_without_taking_a_seat(self, engine, intensive):
        """expired + payment_succeeded → refund_pending; the seat stays free."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(
            purchase.id,
            "hold_expired",
            payload={"provider_status": "not_paid"},
            actor="timer",
            origin=TIMER,
        )
        assert (0, 0, 2) == seats(engine)
        fired = engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="provider")
        assert "refund_pending" == fired.saga.state
        assert (0, 0, 2) == seats(engine)

    def test_reconciliation_keeps_a_held_seat_held(self, engine, intensive):
        """An unknown payment outcome keeps the seat held until resolved."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_outcome_unknown", actor="worker")
        assert "held" == engine.services.purchases.get(purchase.id).seat
        reconcile(engine, purchase.id, "resolve_paid", cause="bank statement")
        assert ("confirmed", "taken") == (
            engine.services.purchases.get(purchase.id).state,
            engine.services.purchases.get(purchase.id).seat,
        )
        assert (0, 1, 1) == seats(engine)

    def test_reconciliation_from_refund_keeps_the_seat_free(self, engine, intensive):
        """A refund of unknown outcome leaves the freed seat free."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="test")
        engine.services.purchases.cancel(purchase.id, reason="student asked")
        engine.sagas.fire(purchase.id, "refund_outcome_unknown", actor="worker")
        assert ("needs_reconciliation", "free") == (
            engine.services.purchases.get(purchase.id).state,
            engine.services.purchases.get(purchase.id).seat,
        )
        assert (0, 0, 2) == seats(engine)

    def test_refund_item_cannot_be_resolved_as_paid(self, engine, intensive):
        """An unknown refund is about money going back: confirming it is refused."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_succeeded", payload=PAID, actor="test")
        engine.services.purchases.cancel(purchase.id, reason="student asked")
        engine.sagas.fire(purchase.id, "refund_outcome_unknown", actor="worker")
        before = dump(engine)
        for event in ("resolve_paid", "resolve_not_paid"):
            with pytest.raises(TransitionNotAllowed):
                engine.sagas.fire(purchase.id, event, actor="operator:ann")
        assert before == dump(engine)
        fired = reconcile(engine, purchase.id, "resolve_refunded")
        assert "refunded" == fired.saga.state

    def test_payment_item_cannot_be_resolved_as_refunded(self, engine, intensive):
        """An unknown payment never took a refund: resolving it as refunded is refused."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_outcome_unknown", actor="worker")
        with pytest.raises(TransitionNotAllowed):
            engine.sagas.fire(purchase.id, "resolve_refunded", actor="operator:ann")
        assert "cancelled" == reconcile(engine, purchase.id, "resolve_not_paid").saga.state
        assert (0, 0, 2) == seats(engine)

    def test_cancel_after_confirmation_frees_the_seat_for_someone_else(self, engine, intensive):
        """Cancelling a confirmed purchase starts a refund and frees its seat."""
        first = start(engine, "op-1", "s1").purchase
        start(engine, "op-2", "s2")
        engine.sagas.fire(first.id, "payment_succeeded", payload=PAID, actor="test")
        engine.services.purchases.cancel(first.id, reason="student asked")
        assert "refund_pending" == engine.services.purchases.get(first.id).state
        assert start(engine, "op-3", "s3").created

    def test_cancel_of_final_purchase_is_refused(self, engine, intensive):
        """A purchase that is already final cannot be cancelled."""
        purchase = start(engine, "op-1", "s1").purchase
        engine.sagas.fire(purchase.id, "payment_failed", actor="test")
        with pytest.raises(TransitionNotAllowed):
            engine.services.purchases.cancel(purchase.id, reason="again")

    def test_unknown_saga_is_not_found(self, engine, intensive):
        """Events for a saga that does not exist raise NotFound."""
        with pytest.raises(NotFound):
            engine.sagas.fire("nope", "cancel", actor="test")

    def test_cancel_never_moves_a_saga_of_another_kind(self, engine, db_url):
        """Purchases.cancel on the id of a user's saga: NotFound, and the saga stays put."""
        ticket = Machine(
            "ticket",
            states=[State("open", initial=True), State("closed", terminal=True)],
            transitions=[Transition("cancel", source="open", target="closed")],
        )
        registry = default_registry()
        registry.register(ticket)
        with Engine(db_url, registry=registry) as custom:
            opened = custom.sagas.start("ticket", operation_id="t-1", request={}).saga
            with pytest.raises(NotFound, match="purchase"):
                custom.services.purchases.cancel(opened.id, reason="wrong api")
            assert "open" == custom.sagas.get(opened.id).state

    def test_audit_rows_are_append_only(self, engine, intensive):
        """The database itself refuses to edit or delete audit rows."""
        start(engine, "op-1", "s1")
        with engine.db.engine.connect() as conn:
            with pytest.raises(Exception, match="append-only"):
                conn.exec_driver_sql("UPDATE saga_transitions SET actor = 'forger'")
            conn.rollback()
            with pytest.raises(Exception, match="append-only"):
                conn.exec_driver_sql("DELETE FROM saga_transitions")

    def test_list_filters_by_state(self, engine, intensive):
        """Listing by state returns only purchases in that state."""
        first = start(engine, "op-1", "s1").purchase
        start(engine, "op-2", "s2")
        engine.sagas.fire(first.id, "payment_failed", actor="test")
        assert [first.id] == [p.id for p in engine.services.purchases.list(state="cancelled")]
        assert 2 == len(engine.services.purchases.list())
        with pytest.raises(InvalidInput):
            engine.services.purchases.list(state="bogus")
