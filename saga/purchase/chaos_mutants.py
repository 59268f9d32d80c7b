"""
The engine broken on purpose, one guard at a time: ``saga chaos --mutant NAME``.

A fault harness that never fails proves nothing; each mutant removes one
guard the engine or the purchase relies on, so that a run can show it
notices.  The purchase's guards are broken here, the engine's in
:mod:`saga.purchase.chaos_engine_mutants` (with the patching both use);
:data:`MUTANTS` names them all.  :func:`apply` patches the running process (the harness applies it
to itself and to every worker process it starts); nothing else in the
package calls it, and a process that was never told to apply one runs the
engine as shipped.  Each patch checks that it changed what it means to
change: a mutant whose target moved fails loudly instead of testing nothing.

The tests' ``sitecustomize`` (``tests/chaos/broken``) applies the same
mutants by name from ``$SAGA_BROKEN_VARIANT``, for tests that run pytest or
another command under one.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Final

from saga.purchase.chaos_engine_mutants import (
    DIALECTS,
    app_clock,
    cas_without_version,
    consumer_without_inbox,
    no_fencing,
    no_inbox_dedupe,
    no_skip_locked,
    outbox_after_commit,
    relay_without_lease,
    sql_patch,
    sqlite_deferred_begin,
    swap,
    timer_without_version,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import SagaRecord, Tx

_CHECK: Final = "intensives_seats_in_range"


def no_seat_guard() -> None:
    """Seats move without the capacity check (and PostgreSQL's table CHECK is dropped)."""
    sql_patch(
        "no_seat_guard",
        {"move_seats": [(r"\s+AND held \+ taken \+ :held_delta \+ :taken_delta <= capacity", "")]},
        dialects=DIALECTS,
    )
    from saga import Engine  # noqa: PLC0415

    def upgrade_and_drop(self: Any) -> Any:
        result = upgrade(self)
        import sqlalchemy as sa  # noqa: PLC0415

        if self.db.dialect != "postgres":
            return result  # SQLite cannot drop a CHECK: there it still stops the oversell
        with self.db.engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE intensives DROP CONSTRAINT IF EXISTS {_CHECK}"))
        return result

    upgrade = swap("no_seat_guard", Engine, "upgrade", upgrade_and_drop)

    Engine.upgrade = upgrade_and_drop  # type: ignore[method-assign]


def no_seat_release() -> None:
    """A purchase that ends without its seat (expired, cancelled, refunded) keeps it."""
    from saga.purchase import purchases  # noqa: PLC0415
    from state_machine.purchase import PURCHASE, SEAT_FREE  # noqa: PLC0415

    def keep_the_seat(
        self: Any, tx: Tx, before: SagaRecord, after: SagaRecord, change: Any
    ) -> None:
        if PURCHASE.state(after.state).meta.get("seat") == SEAT_FREE:
            return
        hook(self, tx, before, after, change)

    hook = swap("no_seat_release", purchases.SeatHook, "on_transition", keep_the_seat)


def random_refund_key() -> None:
    """Each refund attempt mints a new key instead of reusing the one written."""
    from saga.purchase import steps  # noqa: PLC0415

    swap("random_refund_key", steps, "refund_key", lambda key: f"refund:{uuid.uuid4().hex}")
    sql_patch(
        "random_refund_key",
        {
            "record_refund_intent": [
                (
                    r"ON CONFLICT \(saga_id\) DO NOTHING",
                    "ON CONFLICT (saga_id) DO UPDATE SET key = excluded.key",
                )
            ]
        },
        dialects=DIALECTS,
    )


def expiry_without_asking() -> None:
    """A hold expires without asking the provider whether the money arrived."""
    from saga.purchase import app, hooks  # noqa: PLC0415

    def not_paid(db: Any, provider: Any, saga: Any, event: str) -> dict[str, Any]:
        del db, provider, saga
        if event == "hold_expired":
            return {"provider_status": "not_paid", "checked": "nobody asked"}
        return {}

    swap("expiry_without_asking", hooks, "hold_expiry_payload", not_paid)
    swap("expiry_without_asking", app, "hold_expiry_payload", not_paid)


def no_hold_deadline() -> None:
    """The payment intent is written even after the purchase's hold ran out."""
    sql_patch(
        "no_hold_deadline",
        {
            "record_payment_intent": [
                (
                    r"WHERE NOT EXISTS \(SELECT 1 FROM sagas WHERE id = :saga_id AND deadline_at "
                    r"<= (clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))\)",
                    "WHERE CAST(:saga_id AS text) IS NOT NULL",
                )
            ]
        },
        dialects=DIALECTS,
    )


# Each mutant, by name: the guard it removes (the backends it applies to).
MUTANTS: Final[dict[str, Callable[[], None]]] = {
    "no_inbox_dedupe": no_inbox_dedupe,
    "random_refund_key": random_refund_key,
    "expiry_without_asking": expiry_without_asking,
    "no_seat_guard": no_seat_guard,
    "no_seat_release": no_seat_release,
    "cas_without_version": cas_without_version,
    "no_fencing": no_fencing,
    "app_clock": app_clock,
    "no_hold_deadline": no_hold_deadline,
    "timer_without_version": timer_without_version,
    "sqlite_deferred_begin": sqlite_deferred_begin,
    "relay_without_lease": relay_without_lease,
    "no_skip_locked": no_skip_locked,
    "consumer_without_inbox": consumer_without_inbox,
    "outbox_after_commit": outbox_after_commit,
}
# Mutants of one backend's guard: a run on the other would test nothing.
ONLY_ON: Final = {
    "cas_without_version": "postgres",
    "app_clock": "postgres",
    "no_skip_locked": "postgres",
    "sqlite_deferred_begin": "sqlite",
}

_applied: list[str] = []


def apply(name: str) -> None:
    """Break this process's engine the way mutant ``name`` says (once per process)."""
    if name in _applied:
        return
    if name not in MUTANTS:
        msg = f"no mutant {name!r}; known: {', '.join(MUTANTS)}"
        raise ValueError(msg)
    MUTANTS[name]()
    _applied.append(name)
