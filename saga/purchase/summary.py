"""The purchase's money as the console and the CLI show it (``Application.money``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from saga.purchase.money import exponent
from saga.sagas import MoneySummary, Movement

if TYPE_CHECKING:
    from collections.abc import Sequence

    from saga import Context, Tx

# What a purchase should hold in each state: the price, or nothing.
_NOTHING_KEPT: Final = {
    "expired": "nothing kept: the hold expired",
    "cancelled": "nothing kept: cancelled",
    "refund_pending": "nothing kept: to be given back",
    "refunded": "nothing kept: given back",
}


def money_of(engine: Context, saga_ids: Sequence[str]) -> dict[str, MoneySummary]:
    """Each purchase's money among ``saga_ids`` (other sagas are left out)."""
    if not saga_ids:
        return {}
    ids = json.dumps(list(saga_ids))

    def read(tx: Tx) -> dict[str, MoneySummary]:
        moved: dict[str, list[Movement]] = {}
        for row in tx.all("external_movements_of_sagas", ids=ids):
            moved.setdefault(row["saga_id"], []).append(
                Movement(
                    direction=row["direction"],
                    reference=row["reference"],
                    amount_minor=int(row["amount_minor"]),
                    operator=row["operator"],
                    reason=row["reason"],
                    at=row["at"],
                )
            )
        found: dict[str, MoneySummary] = {}
        for row in tx.all("money_of_purchases", ids=ids):
            outside = moved.get(row["saga_id"], [])
            received = sum(m.amount_minor for m in outside if m.direction == "in")
            given_back = sum(m.amount_minor for m in outside if m.direction == "out")
            state, price = row["state"], int(row["amount_minor"])
            note = _NOTHING_KEPT.get(state, f"the price ({state})")
            foreign = row["charged_currency"]
            if row["charged_minor"] and foreign and foreign != row["currency"]:
                note += f"; charged in {foreign}, never the price"
            found[row["saga_id"]] = MoneySummary(
                currency=row["currency"],
                exponent=exponent(row["currency"]),
                expected_minor=0 if state in _NOTHING_KEPT else price,
                expected_note=note,
                charged_minor=int(row["charged_minor"]) + received,
                refunded_minor=int(row["refunded_minor"]) + given_back,
                subject=f"student {row['student_id']} · intensive {row['intensive_id']}",
                external=tuple(outside),
            )
        return found

    return engine.db.transaction(read, write=False)
