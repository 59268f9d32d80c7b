"""
The purchase's invariants for ``saga verify``: seats, money, access.

Money is checked twice.  ``money_matches_state`` reads the engine's own
records (payments, refunds and money moved outside the provider) against
each purchase's state; ``records_match_provider`` asks the provider, through
its port and by key, about every payment and refund record and compares
amount, currency and status.  A provider that also lists its whole ledger
(the sandbox does) lets two more checks see charges and refunds the engine
never heard of.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.codec import load_json
from saga.exceptions import SagaError
from saga.ops import Invariant
from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Context, Tx
    from steps import ProviderPayment, ProviderRefund

_TERMINAL: Final = frozenset(s.name for s in PURCHASE.states if s.terminal)


@dataclass(slots=True)
class ProviderView:
    """What the provider said about every money record, or why it could not be asked."""

    problem: str | None = None
    payments: dict[str, ProviderPayment | None] = field(default_factory=dict)
    refunds: dict[str, ProviderRefund | None] = field(default_factory=dict)
    ledger: dict[str, list[dict[str, Any]]] | None = None


def purchase_invariants(engine: Context) -> list[Invariant]:
    """The purchase application's invariants, checked on ``engine``'s data and provider."""
    facts = engine.db.transaction(_facts, write=False)
    view = provider_view(engine, facts)
    return [check(facts, view) for check in PURCHASE_CHECKS]


def _facts(tx: Tx) -> dict[str, Any]:
    return {
        "ledger": tx.all("seat_ledger"),
        "purchases": tx.all("verify_purchases"),
        "payments": tx.all("verify_payments"),
        "refunds": tx.all("verify_refunds"),
        "external": tx.all("verify_external"),
        "access": tx.all("verify_access"),
        "reviews": tx.all("verify_event_reviews"),
        "expiries": tx.all("verify_expiries"),
    }


def provider_view(engine: Context, facts: dict[str, Any]) -> ProviderView:
    """Ask the provider about each payment and refund record by key (and for its ledger)."""
    view = ProviderView()
    try:
        provider = engine.services.provider
        for row in facts["payments"]:
            view.payments[row["key"]] = provider.payment_status(key=row["key"])
        for row in facts["refunds"]:
            view.refunds[row["key"]] = provider.refund_status(key=row["key"])
        ledger = getattr(provider, "ledger", None)
        view.ledger = ledger() if callable(ledger) else None
    except SagaError as exc:
        return ProviderView(problem=exc.message)
    except Exception as exc:  # noqa: BLE001 - an unreachable provider is a finding, not a crash
        return ProviderView(problem=f"the payment provider did not answer: {exc}")
    return view


def _money_by_purchase(facts: dict[str, Any]) -> dict[str, dict[str, int]]:
    """
    Per purchase, by the engine's records: charged and refunded, in minor units.

    ``foreign`` counts charges in another currency than the price: their
    amount is money held all the same, but never the price.
    """
    money: dict[str, dict[str, int]] = defaultdict(
        lambda: {"charged": 0, "refunded": 0, "foreign": 0}
    )
    currency = {row["id"]: row["currency"] for row in facts["purchases"]}
    for row in facts["payments"]:
        if row["status"] == "succeeded":
            mine = money[row["saga_id"]]
            mine["charged"] += int(row["charged_minor"] or 0)
            mine["foreign"] += row["charged_currency"] != currency.get(row["saga_id"])
    for row in facts["refunds"]:
        if row["status"] == "succeeded":
            money[row["saga_id"]]["refunded"] += int(row["amount_minor"])
    for row in facts["external"]:
        which = "charged" if row["direction"] == "in" else "refunded"
        money[row["saga_id"]][which] += int(row["amount_minor"])
    return money


def _provider_reachable(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant("provider_reachable", "the payment provider answers about the money records")
    rule.check(view.problem is None, view.problem or "")
    return rule


def _seats(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant("seats", "held + taken + free = capacity, none negative, counters = purchases")
    for row in facts["ledger"]:
        free = row["capacity"] - row["held"] - row["taken"]
        rule.check(
            row["held"] >= 0
            and row["taken"] >= 0
            and free >= 0
            and (row["held"], row["taken"]) == (row["purchases_held"], row["purchases_taken"]),
            f"intensive {row['id']}: held {row['held']} taken {row['taken']} free {free}, "
            f"purchases hold {row['purchases_held']} and take {row['purchases_taken']}",
        )
    return rule


def _seat_follows_state(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant("seat_follows_state", "each purchase holds exactly the seat its state says")
    for row in facts["purchases"]:
        if not PURCHASE.has_state(row["state"]):
            rule.check(False, f"purchase {row['id']} is in {row['state']}, not a purchase state")
            continue
        declared = PURCHASE.state(row["state"]).meta.get("seat")
        if declared is None:  # needs_reconciliation keeps what it had
            came_from = row["previous_state"]
            declared = "free" if came_from == "refund_pending" else "held"
        rule.check(
            row["seat"] == declared,
            f"purchase {row['id']} in {row['state']} has seat {row['seat']}, not {declared}",
        )
    return rule


def _one_charge(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "one_charge_per_purchase", "at most one successful charge per purchase (provider ledger)"
    )
    charges: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for charge in (view.ledger or {}).get("charges", []):
        charges[charge["reference"]].append(charge)
    for reference, mine in charges.items():
        succeeded = [c for c in mine if c["status"] == "succeeded"]
        rule.check(
            len(succeeded) <= 1, f"purchase {reference}: {len(succeeded)} successful charges"
        )
    return rule


def _one_refund(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant("one_refund_per_payment", "at most one refund per payment (provider ledger)")
    ledger = view.ledger or {}
    by_payment: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for refund in ledger.get("refunds", []):
        by_payment[refund["payment_id"]].append(refund)
    for charge in ledger.get("charges", []):
        refunds = [r for r in by_payment.get(charge["payment_id"], []) if r["status"] != "failed"]
        rule.check(len(refunds) <= 1, f"payment {charge['payment_id']}: {len(refunds)} refunds")
    return rule


def _money(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "money_matches_state",
        "by the engine's records (provider answers and external movements): confirmed: "
        "charged - refunded = price; expired/cancelled: nothing kept; refunded: all of it back",
    )
    money = _money_by_purchase(facts)
    for row in facts["purchases"]:
        charged, back = money[row["id"]]["charged"], money[row["id"]]["refunded"]
        state = row["state"]
        if state == "confirmed":
            ok = charged - back == row["amount_minor"] and not money[row["id"]]["foreign"]
        elif state in ("expired", "cancelled"):
            ok = charged == back  # nothing taken, or all of it given back
        elif state == "refunded":
            ok = charged > 0 and back == charged
        else:
            continue  # still moving, or owned by an operator
        rule.check(
            ok,
            f"purchase {row['id']} is {state} with {charged} charged and {back} "
            f"refunded (price {row['amount_minor']})",
        )
    return rule


def _refunded_within_charged(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant("refunded_within_charged", "no purchase gets back more than it paid")
    for saga_id, money in sorted(_money_by_purchase(facts).items()):
        rule.check(
            money["refunded"] <= money["charged"],
            f"purchase {saga_id}: {money['refunded']} refunded of {money['charged']} charged",
        )
    return rule


def _records_match_provider(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "records_match_provider",
        "every payment and refund record equals the provider's answer by key "
        "(status, amount, currency); the provider holds no money a final purchase does not record",
    )
    if view.problem is not None:
        return rule
    state = {row["id"]: row["state"] for row in facts["purchases"]}
    for row in facts["payments"]:
        rule.check(*_payment_agrees(row, view.payments.get(row["key"]), state.get(row["saga_id"])))
    for row in facts["refunds"]:
        rule.check(*_refund_agrees(row, view.refunds.get(row["key"]), state.get(row["saga_id"])))
    return rule


def _payment_agrees(row: Any, seen: ProviderPayment | None, state: str | None) -> tuple[bool, str]:
    said = "nothing" if seen is None else f"{seen.status} {seen.charged_minor} {seen.currency}"
    problem = (
        f"payment {row['key']}: recorded {row['status']} {row['charged_minor']} "
        f"{row['charged_currency']}, the provider says {said}"
    )
    if row["status"] in ("succeeded", "failed", "cancelled"):
        ok = seen is not None and seen.status == row["status"]
        if ok and row["status"] == "succeeded" and seen is not None:
            ok = (seen.charged_minor, seen.currency) == (
                row["charged_minor"],
                row["charged_currency"],
            )
        return ok, problem
    # Not settled in the records: fine while the purchase moves, not once it is final.
    return not (state in _TERMINAL and seen is not None and seen.money_taken), problem


def _refund_agrees(row: Any, seen: ProviderRefund | None, state: str | None) -> tuple[bool, str]:
    said = "nothing" if seen is None else f"{seen.status} {seen.amount_minor}"
    problem = (
        f"refund {row['key']}: recorded {row['status']} {row['amount_minor']}, "
        f"the provider says {said}"
    )
    if row["status"] in ("succeeded", "failed"):
        ok = (
            seen is not None
            and seen.status == row["status"]
            and seen.amount_minor == row["amount_minor"]
        )
        return ok, problem
    return not (state in _TERMINAL and seen is not None and seen.status == "succeeded"), problem


def _money_fencing(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "money_fencing", "no payment or refund written under an expired or superseded lease"
    )
    for table in ("payments", "refunds"):
        for row in facts[table]:
            rule.check(
                int(row["stale_writes"]) == 0,
                f"{table[:-1]} {row['key']}: {row['stale_writes']} write(s) under a lost lease",
            )
    return rule


def _one_review_per_event(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "one_review_per_event",
        "a provider event contradicting the provider puts its evidence before operators once",
    )
    seen: Counter[str] = Counter()
    for row in facts["reviews"]:
        evidence = load_json(row["evidence"]) or {}
        for part in [evidence, *evidence.get("contradictions", [])]:
            if part.get("event_id"):
                seen[str(part["event_id"])] += 1
    rule.checked = len(seen)
    for event, times in sorted(seen.items()):
        if times > 1:
            rule.problems.append(f"event {event} was put before operators {times} times")
    return rule


def _asked_before_expiry(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "asked_before_expiry",
        "a hold with a payment requested expires only on the provider's answer, kept in its "
        "audit row (never blindly)",
    )
    for row in facts["expiries"]:
        payload = load_json(row["payload"]) or {}
        answer = payload.get("provider_payment")
        rule.check(
            isinstance(answer, dict) and "found" in answer,
            f"purchase {row['saga_id']} v{row['version']} expired without the provider's answer",
        )
    return rule


def _access(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "access_follows_state",
        "confirmed purchases have access; refunded, expired and cancelled ones have none",
    )
    access = {row["saga_id"]: row["revoked_at"] is None for row in facts["access"]}
    for row in facts["purchases"]:
        has = access.get(row["id"], False)
        if row["state"] == "confirmed":
            rule.check(has, f"purchase {row['id']} is confirmed without access")
        elif row["state"] in ("refunded", "expired", "cancelled"):
            rule.check(not has, f"purchase {row['id']} is {row['state']} and still has access")
    return rule


PURCHASE_CHECKS: Final[tuple[Callable[[dict[str, Any], ProviderView], Invariant], ...]] = (
    _provider_reachable,
    _seats,
    _seat_follows_state,
    _one_charge,
    _one_refund,
    _money,
    _refunded_within_charged,
    _records_match_provider,
    _money_fencing,
    _one_review_per_event,
    _asked_before_expiry,
    _access,
)
