"""
Who may fire an event, and the record of the events refused at their door.

A machine declares who may fire each event (``Machine(fired_by=…)``); the
outcomes of a kind's reconciliation policy that it does not name are kept to
reconciliation; every other event it does not name may come from anywhere.
Each door says which it is (``fire_in(…, origin=…)``): an operator's
``instances fire``, an inbox route, the application's steps, a timer, the
reconciliation queue.  A refused event changes nothing; its refusal is
written in a transaction of its own (the refused one rolled back) and shown
with the saga (``saga instances show``) and with its open item.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga.codec import as_utc, dump_json, iso
from saga.exceptions import EventRefused
from state_machine import OPERATOR, ORIGINS, RECONCILIATION, ROUTE, STEP, TIMER

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga.core.store.db import Tx
    from state_machine import Machine

_DOORS = {
    OPERATOR: "an operator fires it with `saga instances fire`",
    ROUTE: "it comes as a message through its inbox route (`saga messages deliver`, a webhook)",
    STEP: "the application's steps fire it (`saga worker`)",
    TIMER: "its timer fires it when the state's deadline passes (`saga worker`)",
}


def allowed_origins(machine: Machine, outcomes: Mapping[str, str], event: str) -> frozenset[str]:
    """Who may fire ``event`` on a saga of ``machine`` reconciled with ``outcomes``."""
    declared = machine.origins(event)
    if declared is not None:
        return declared
    if event in outcomes.values():
        # An outcome of its reconciliation moves money or a decision the
        # judge must check: by default, only reconciliation fires it.
        return frozenset({RECONCILIATION})
    return frozenset(ORIGINS)


def check_origin(
    tx: Tx, machine: Machine, outcomes: Mapping[str, str], saga_id: str, *, event: str, origin: str
) -> None:
    """Raise :class:`~saga.exceptions.EventRefused` unless ``origin`` may fire ``event``."""
    allowed = allowed_origins(machine, outcomes, event)
    if origin in allowed:
        return
    raise EventRefused(
        saga_id=saga_id,
        kind=machine.name,
        event=event,
        origin=origin,
        allowed=[o for o in ORIGINS if o in allowed],
        instead=_instead(tx, outcomes, saga_id, event, allowed),
    )


def _instead(
    tx: Tx, outcomes: Mapping[str, str], saga_id: str, event: str, allowed: frozenset[str]
) -> str:
    if RECONCILIATION in allowed:
        row = tx.one("open_recon_item_of_saga", saga_id=saga_id)
        item = "ITEM" if row is None else str(row["id"])
        outcome = next((o for o, e in outcomes.items() if e == event), event)
        return (
            f"use `saga recon resolve {item} --outcome {outcome} --operator NAME "
            "--reason TEXT`: the decision is checked by the application's judge"
        )
    return "; ".join(_DOORS[o] for o in ORIGINS if o in allowed)


def record_refusal(
    tx: Tx,
    *,
    refused: EventRefused,
    actor: str,
    cause: str | None,
    payload: Mapping[str, Any],
) -> None:
    """Keep a refusal for operators: with the saga, and on its open item if it has one."""
    tx.run(
        "insert_event_refusal",
        saga_id=refused.saga_id,
        event=refused.event,
        origin=refused.origin,
        actor=actor,
        cause=cause,
        why=refused.message,
        payload=dump_json(dict(payload)),
    )
    item = tx.one("any_open_recon_item_of_saga", saga_id=refused.saga_id)
    if item is not None:
        # On its item's audit trail too (recon.lifecycle.event_log's row; this
        # module stays below saga.core.recon, which builds on the saga runtime).
        detail = {"decision": f"fire {refused.event} ({refused.origin})", "why": refused.message}
        tx.run(
            "insert_recon_event",
            item_id=str(item["id"]),
            actor=actor,
            action="refused",
            detail=dump_json(detail),
        )


def refusals_in(tx: Tx, saga_id: str) -> list[dict[str, Any]]:
    """The events refused for a saga, oldest first."""
    return [
        {
            "event": row["event"],
            "origin": row["origin"],
            "actor": row["actor"],
            "cause": row["cause"],
            "why": row["why"],
            "at": iso(as_utc(row["at"])),
        }
        for row in tx.all("event_refusals_of_saga", saga_id=saga_id)
    ]
