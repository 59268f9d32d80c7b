"""``saga sandbox ledger``: the sandbox payment provider's charges, refunds and card holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli import EXIT_OK, Leaf, Output, add_common_options, open_engine

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Leaf]:
    """Add ``sandbox``."""
    sandbox = subparsers.add_parser("sandbox", help="the sandbox payment provider")
    sandbox_commands = sandbox.add_subparsers(dest="action", metavar="ACTION", required=True)
    ledger = sandbox_commands.add_parser(
        "ledger", help="its charges and refunds, and its card holds (authorizations)"
    )
    add_common_options(ledger, top_level=False)
    return {"sandbox ledger": Leaf(_ledger)}


def _ledger(args: argparse.Namespace, out: Output) -> int:
    from saga.purchase.money import format_minor

    with open_engine(args, create=False) as engine:
        ledger = engine.services.sandbox.ledger()
    charges = [
        {
            "payment_id": c["payment_id"],
            "key": c["key"],
            "amount": format_minor(int(c["charged_minor"] or c["amount_minor"]), c["currency"]),
            "currency": c["currency"],
            "status": c["status"],
            "reference": c["reference"],
            "method": c["method"],
            "requested_amount": format_minor(int(c["amount_minor"]), c["currency"]),
        }
        for c in ledger["charges"]
    ]
    currencies = {c["payment_id"]: c["currency"] for c in ledger["charges"]}
    refunds = [
        {
            "refund_id": r["refund_id"],
            "payment_id": r["payment_id"],
            "key": r["key"],
            "amount": format_minor(int(r["amount_minor"]), currencies.get(r["payment_id"], "EUR")),
            "status": r["status"],
            "reference": r["reference"],
        }
        for r in ledger["refunds"]
    ]
    holds = [
        {
            "authorization_id": a["authorization_id"],
            "key": a["key"],
            "amount": format_minor(int(a["authorized_minor"] or a["amount_minor"]), a["currency"]),
            "currency": a["currency"],
            "status": a["status"],
            "reference": a["reference"],
            "method": a["method"],
            "requested_amount": format_minor(int(a["amount_minor"]), a["currency"]),
            "capture_id": a["capture_id"],
            "void_key": a["void_key"],
        }
        for a in ledger["authorizations"]
    ]
    if out.as_json:
        out.json({"charges": charges, "refunds": refunds, "authorizations": holds})
        return EXIT_OK
    out.line(f"charges ({len(charges)}):")
    out.table(
        ("PAYMENT", "KEY", "AMOUNT", "STATUS", "METHOD"),
        (
            (c["payment_id"], c["key"], f"{c['amount']} {c['currency']}", c["status"], c["method"])
            for c in charges
        ),
    )
    out.line(f"refunds ({len(refunds)}):")
    out.table(
        ("REFUND", "PAYMENT", "KEY", "AMOUNT", "STATUS"),
        ((r["refund_id"], r["payment_id"], r["key"], r["amount"], r["status"]) for r in refunds),
    )
    out.line(f"authorizations ({len(holds)}):")
    out.table(
        ("AUTHORIZATION", "KEY", "AMOUNT", "STATUS", "CAPTURE", "VOID KEY"),
        (
            (
                a["authorization_id"],
                a["key"],
                f"{a['amount']} {a['currency']}",
                a["status"],
                a["capture_id"] or "-",
                a["void_key"] or "-",
            )
            for a in holds
        ),
    )
    return EXIT_OK
