"""``saga webhook deliver``: one event of the purchase's payment provider, into its inbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    Leaf,
    Output,
    add_common_options,
    open_engine,
)

if TYPE_CHECKING:
    import argparse

FLAGS = {
    "event_id": "--event-id",
    "type": "--type",
    "payment_id": "--payment",
    "amount": "--amount",
    "currency": "--currency",
}


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Leaf]:
    """Add ``deliver`` under the engine's ``webhook``."""
    from steps.purchase import PROVIDER_EVENTS as EVENTS

    deliver = actions.add_parser("deliver", help="deliver one provider event (deduplicated by id)")
    deliver.add_argument(
        "--event-id", required=True, metavar="E", help="the event's id at the provider"
    )
    deliver.add_argument("--type", required=True, metavar="T", help=", ".join(EVENTS))
    deliver.add_argument("--payment", required=True, metavar="ID", help="the provider's payment id")
    deliver.add_argument("--amount", metavar="A", help="amount charged, e.g. 49.90")
    deliver.add_argument("--currency", metavar="C", help="ISO 4217 code of --amount, e.g. EUR")
    deliver.add_argument("--refund", metavar="ID", help="the provider's refund id (refund events)")
    add_common_options(deliver, top_level=False)
    return {"webhook deliver": Leaf(_deliver, FLAGS)}


def _deliver(args: argparse.Namespace, out: Output) -> int:
    from saga.purchase import money as _money
    from saga.purchase.inbox import ProviderEvent

    amount = None
    if args.amount is not None:
        currency = _money.currency(args.currency)
        amount = _money.parse_amount(args.amount, currency, field="amount")
    event = ProviderEvent(
        event_id=args.event_id,
        type=args.type,
        payment_id=args.payment,
        amount_minor=amount,
        currency=args.currency,
        refund_id=args.refund,
    )
    with open_engine(args) as engine:
        delivery = engine.services.inbox.deliver(event, source="cli")
    if out.as_json:
        out.json(delivery.to_json())
    elif delivery.conflict:
        pass
    else:
        seen = " (duplicate: already delivered)" if delivery.duplicate else ""
        where = f" -> purchase {delivery.saga_id} ({delivery.state})" if delivery.saga_id else ""
        out.line(f"event {delivery.event_id}: {delivery.outcome}{seen}{where}")
        for contradiction in delivery.contradictions:
            out.line(f"  the provider disagrees: {contradiction}")
        if delivery.review_item:
            out.line(f"  evidence kept for review: item {delivery.review_item}")
    if delivery.conflict:
        out.error(f"event {delivery.event_id}: {delivery.detail}")
        return EXIT_CONFLICT
    if delivery.outcome == "unmatched":
        # Not found: a sender retries, and the inbox matches the event again then.
        out.error(
            f"event {delivery.event_id}: {delivery.detail}; recorded, deliver it again "
            "once the payment is known"
        )
        return EXIT_NOT_FOUND
    return EXIT_OK
