"""
The purchase of a paid intensive: acceptance, seat accounting, reading.

The machine is :data:`state_machine.purchase.PURCHASE`; this module adds what
the engine cannot know: a purchase holds one seat of one intensive, and
each state's ``meta["seat"]`` says whether that seat is held, taken or free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga import validation as _validation
from saga.codec import as_utc, iso, load_json, maybe_utc
from saga.exceptions import (
    DatabaseError,
    DuplicatePurchase,
    NotFound,
    SeatUnavailable,
    SoldOut,
    TransitionNotAllowed,
)
from saga.purchase.catalogue import get_intensive_in
from saga.purchase.money import format_minor
from saga.sagas import Change, Fired, Sagas, history_in
from state_machine.purchase import PURCHASE, SEAT_FREE, SEAT_HELD, SEAT_TAKEN
from steps import DEFAULT_PAYMENT_METHOD, PAYMENT_METHODS
from steps.purchase import DEFAULT_HOLD_SECONDS as _DEFAULT_HOLD

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga import SagaRecord, Tx
    from saga.sagas import Started, TransitionRecord
    from saga.store import Database

KIND: Final = PURCHASE.name
DEFAULT_HOLD_SECONDS: Final = _DEFAULT_HOLD
MAX_HOLD_SECONDS: Final = 10 * 365 * 24 * 3600
LIST_MAX: Final = 10_000
# The unique index that keeps one live seat per student and intensive; SQLite
# names the columns instead of the index in its error.
_ONE_SEAT_PER_STUDENT: Final = frozenset(
    {"purchases_one_seat_per_student", "purchases.intensive_id, purchases.student_id"}
)


class SeatHook:
    """Moves the intensive's seat counters with the purchase's state, in the same transaction."""

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Insert the purchase row and hold its seat (or refuse: sold out)."""
        data = saga.data
        taken = tx.one(
            "student_seat", intensive_id=data["intensive_id"], student_id=data["student_id"]
        )
        if taken is not None:
            raise DuplicatePurchase(
                intensive_id=data["intensive_id"], student_id=data["student_id"]
            )
        # Count the seat first (or refuse: sold out), then write the purchase
        # already holding it: one statement fewer than inserting it free and
        # moving it.
        seat = _seat_of(saga.state)
        self._count(tx, data["intensive_id"], SEAT_FREE, seat)
        tx.run(
            "insert_purchase",
            saga_id=saga.id,
            intensive_id=data["intensive_id"],
            student_id=data["student_id"],
            amount_minor=data["amount_minor"],
            currency=data["currency"],
            seat=seat,
        )

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Move the seat to where the new state says (``None``: where it was)."""
        del change
        wanted = PURCHASE.state(after.state).meta.get("seat")
        if wanted is None or wanted == PURCHASE.state(before.state).meta.get("seat"):
            return  # both states say where the seat is, and it is the same place
        row = tx.one("purchase_seat", saga_id=after.id)
        if row is None:
            raise NotFound(kind="purchase", key=after.id)
        if wanted is None or wanted == row["seat"]:
            return
        self._move(tx, after.id, row["intensive_id"], row["seat"], wanted)

    @classmethod
    def _move(cls, tx: Tx, saga_id: str, intensive_id: str, frm: str, to: str) -> None:
        cls._count(tx, intensive_id, frm, to)
        if tx.run("set_purchase_seat", saga_id=saga_id, from_seat=frm, to_seat=to) != 1:
            raise SeatUnavailable(
                intensive_id=intensive_id, reason=f"purchase {saga_id} no longer has a {frm} seat"
            )

    @staticmethod
    def _count(tx: Tx, intensive_id: str, frm: str, to: str) -> None:
        """Move one seat between the intensive's counters (guarded: never oversold)."""
        held = (to == SEAT_HELD) - (frm == SEAT_HELD)
        taken = (to == SEAT_TAKEN) - (frm == SEAT_TAKEN)
        if tx.one("move_seats", id=intensive_id, held_delta=held, taken_delta=taken) is None:
            if held + taken > 0:
                raise SoldOut(intensive_id=intensive_id)
            raise SeatUnavailable(
                intensive_id=intensive_id, reason=f"no {frm} seat to move to {to}"
            )


def _seat_of(state: str) -> str:
    seat = PURCHASE.state(state).meta.get("seat")
    return SEAT_FREE if seat is None else str(seat)


@dataclass(frozen=True, slots=True, kw_only=True)
class Purchase:
    """A purchase as users see it: its saga, its seat and its history."""

    id: str
    operation_id: str | None
    intensive_id: str
    student_id: str
    amount_minor: int
    currency: str
    seat: str
    state: str
    version: int
    payment_method: str
    hold_seconds: int
    deadline_at: datetime | None
    deadline_event: str | None
    created_at: datetime
    updated_at: datetime
    history: tuple[TransitionRecord, ...] = ()
    payment: dict[str, Any] | None = None
    refund: dict[str, Any] | None = None
    reconciliation: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: RowMapping, history: tuple[TransitionRecord, ...] = ()) -> Purchase:
        """Build it from a ``get_purchase`` / ``list_purchases`` row."""
        data = load_json(row["data"])
        return cls(
            id=row["id"],
            operation_id=row["operation_id"],
            intensive_id=row["intensive_id"],
            student_id=row["student_id"],
            amount_minor=int(row["amount_minor"]),
            currency=row["currency"],
            seat=row["seat"],
            state=row["state"],
            version=int(row["version"]),
            payment_method=str(data.get("payment_method", DEFAULT_PAYMENT_METHOD)),
            hold_seconds=int(data.get("hold_seconds", DEFAULT_HOLD_SECONDS)),
            deadline_at=maybe_utc(row["deadline_at"]),
            deadline_event=row["deadline_event"],
            created_at=as_utc(row["created_at"]),
            updated_at=as_utc(row["updated_at"]),
            history=history,
        )

    def to_json(self, *, with_history: bool = True) -> dict[str, Any]:
        """The contract's purchase object, plus the seat, amount and deadline."""
        out: dict[str, Any] = {
            "id": self.id,
            "operation_id": self.operation_id,
            "intensive_id": self.intensive_id,
            "student_id": self.student_id,
            "state": self.state,
            "version": self.version,
            "seat": self.seat,
            "amount": format_minor(self.amount_minor, self.currency),
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "payment_method": self.payment_method,
            "hold_seconds": self.hold_seconds,
            "deadline": (
                {"at": iso(self.deadline_at), "event": self.deadline_event}
                if self.deadline_at is not None
                else None
            ),
            "payment": self.payment,
            "refund": self.refund,
            "reconciliation": self.reconciliation,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
        if with_history:
            out["history"] = [entry.to_json() for entry in self.history]
        return out


def _get_in(tx: Tx, saga_id: str) -> Purchase:
    """:meth:`Purchases.get` inside ``tx``."""
    row = tx.one("get_purchase", saga_id=saga_id)
    if row is None:
        raise NotFound(kind="purchase", key=saga_id)
    return _with_trail(tx, Purchase.from_row(row, tuple(history_in(tx, saga_id))))


def _created(started: Started, operation_id: str) -> Purchase:
    """
    A purchase this transaction created, as :func:`_get_in` would read it back.

    Everything is known without a read: the saga row its insert returned, the
    request in its data, the seat its first state holds, the one audit row
    written; no payment, refund or reconciliation item exists yet.
    """
    saga = started.saga
    data = saga.data
    return Purchase(
        id=saga.id,
        operation_id=operation_id,
        intensive_id=str(data["intensive_id"]),
        student_id=str(data["student_id"]),
        amount_minor=int(data["amount_minor"]),
        currency=str(data["currency"]),
        seat=_seat_of(saga.state),
        state=saga.state,
        version=saga.version,
        payment_method=str(data.get("payment_method", DEFAULT_PAYMENT_METHOD)),
        hold_seconds=int(data.get("hold_seconds", DEFAULT_HOLD_SECONDS)),
        deadline_at=saga.deadline_at,
        deadline_event=saga.deadline_event,
        created_at=saga.created_at,
        updated_at=saga.updated_at,
        history=started.history,
    )


def _with_trail(tx: Tx, purchase: Purchase) -> Purchase:
    """The purchase with its payment, refund and latest reconciliation item."""
    payment = tx.one("get_payment", saga_id=purchase.id)
    refund = tx.one("get_refund", saga_id=purchase.id)
    item = tx.one("latest_recon_item_of_saga", saga_id=purchase.id)
    return dataclasses.replace(
        purchase,
        payment=None
        if payment is None
        else {
            "payment_id": payment["provider_ref"],
            "key": payment["key"],
            "status": payment["status"],
            "charged_minor": payment["charged_minor"],
        },
        refund=None
        if refund is None
        else {
            "refund_id": refund["provider_ref"],
            "key": refund["key"],
            "status": refund["status"],
            "amount_minor": refund["amount_minor"],
        },
        reconciliation=None
        if item is None
        else {
            "id": item["id"],
            "status": item["status"],
            "reason": item["reason"],
            "owner": item["owner"],
            "next_check_at": iso(maybe_utc(item["next_check_at"])),
            "attempts": int(item["attempts"]),
            "version": int(item["version"]),
        },
    )


@dataclass(frozen=True, slots=True)
class StartResult:
    """A purchase accepted (or found again under the same operation id)."""

    purchase: Purchase
    created: bool


class Purchases:
    """Start, read and cancel purchases."""

    def __init__(self, db: Database, sagas: Sagas) -> None:
        self.db = db
        self.sagas = sagas

    def start(
        self,
        *,
        operation_id: str,
        intensive_id: str,
        student_id: str,
        payment_method: str = DEFAULT_PAYMENT_METHOD,
        hold_seconds: int = DEFAULT_HOLD_SECONDS,
        actor: str = "api",
    ) -> StartResult:
        """
        Accept a purchase: hold a seat and queue the payment request, in one transaction.

        The same ``operation_id`` with the same request returns the same
        purchase; with another request it raises
        :class:`~saga.exceptions.IdempotencyConflict`.  An unknown intensive
        is :class:`~saga.exceptions.NotFound`; no
        free seat is :class:`~saga.exceptions.SoldOut`.  A refusal changes
        nothing.
        """
        _validation.operation_id(operation_id)
        intensive_id = _validation.identifier("intensive_id", intensive_id)
        student_id = _validation.identifier("student_id", student_id)
        payment_method = _validation.one_of("payment_method", payment_method, PAYMENT_METHODS)
        hold_seconds = _validation.whole_number(
            "hold_seconds", hold_seconds, minimum=1, maximum=MAX_HOLD_SECONDS
        )
        request = {
            "intensive_id": intensive_id,
            "student_id": student_id,
            "payment_method": payment_method,
            "hold_seconds": hold_seconds,
        }

        def prepare(tx: Tx) -> dict[str, Any]:
            intensive = get_intensive_in(tx, intensive_id)  # NotFound: exit 4, nothing changed
            return {
                **request,
                "amount_minor": intensive.price_minor,
                "currency": intensive.currency,
            }

        try:
            # The reply's read-back in the acceptance's own transaction.
            started, purchase = self.sagas.start_then(
                KIND,
                operation_id=operation_id,
                request=request,
                prepare=prepare,
                actor=actor,
                # Created in this transaction: all there is to say is known.
                then=lambda tx, started: (
                    _created(started, operation_id)
                    if started.created
                    else _get_in(tx, started.saga.id)
                ),
            )
        except DatabaseError as exc:
            if exc.constraint in _ONE_SEAT_PER_STUDENT:
                raise DuplicatePurchase(intensive_id=intensive_id, student_id=student_id) from exc
            raise
        return StartResult(purchase=purchase, created=started.created)

    def get(self, saga_id: str) -> Purchase:
        """One purchase with its history; :class:`NotFound` if there is none."""
        _validation.identifier("purchase_id", saga_id)

        return self.db.transaction(lambda tx: _get_in(tx, saga_id), write=False)

    def list(
        self, *, state: str | None = None, intensive_id: str | None = None, limit: int = 100
    ) -> list[Purchase]:
        """Purchases, newest first, optionally of one state and one intensive."""
        if state is not None:
            _validation.one_of("state", state, PURCHASE.state_names)
        if intensive_id is not None:
            _validation.identifier("intensive_id", intensive_id)
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=LIST_MAX + 1)

        def work(tx: Tx) -> list[Purchase]:
            rows = tx.all("list_purchases", state=state, intensive_id=intensive_id, limit=limit)
            return [_with_trail(tx, Purchase.from_row(row)) for row in rows]

        return self.db.transaction(work, write=False)

    def cancel(self, saga_id: str, *, reason: str, actor: str = "operator") -> Fired:
        """
        Cancel a purchase, with a reason for the audit trail.

        Before payment the purchase is cancelled and its seat freed; once
        confirmed it goes to ``refund_pending`` (the money goes back).

        A purchase in a state that cannot be cancelled raises
        :class:`~saga.exceptions.TransitionNotAllowed`.
        """
        _validation.identifier("purchase_id", saga_id)
        reason = _validation.text("reason", reason)
        fired = self.sagas.fire(
            saga_id, "cancel", payload={"reason": reason}, actor=actor, cause=reason, kind=KIND
        )
        if fired.absorbed:
            raise TransitionNotAllowed(
                state=fired.saga.state, event="cancel", reason="the purchase is already final"
            )
        return fired
