"""``saga demo``: a short scripted purchase scenario on the embedded default."""

from __future__ import annotations

import secrets
from collections import Counter
from typing import TYPE_CHECKING, Any

from saga._cli._common import EXIT_OK, Command, Output, add_common_options, open_engine
from saga.exceptions import ConflictError

if TYPE_CHECKING:
    import argparse

    from saga._engine import Engine


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``demo``."""
    demo = subparsers.add_parser(
        "demo", help="run a short purchase scenario and report seats and states"
    )
    add_common_options(demo, top_level=False)
    return {"demo": Command(_demo)}


def _demo(args: argparse.Namespace, out: Output) -> int:
    run = secrets.token_hex(3)
    steps: list[str] = []
    with open_engine(args) as engine:
        report = _scenario(engine, run, steps)
    if out.as_json:
        out.json(report)
        return EXIT_OK
    for step in steps:
        out.line(step)
    out.line()
    out.line(f"intensive {report['intensive']['id']}: {report['intensive']['seats']}")
    out.line(f"purchases by state: {report['states']}")
    return EXIT_OK


def _scenario(engine: Engine, run: str, steps: list[str]) -> dict[str, Any]:
    intensive_id = f"demo-{run}-js"
    intensive, _ = engine.catalogue.add(intensive_id, seats=3, price="49.00", currency="EUR")
    steps.append(f"added intensive {intensive_id}: 3 seats at 49.00 EUR")
    purchases: dict[str, str] = {}
    for n in range(1, 6):
        student = f"student-{n}"
        try:
            started = engine.purchases.start(
                operation_id=f"demo-{run}-op-{n}", intensive_id=intensive_id, student_id=student
            )
        except ConflictError as exc:
            steps.append(f"{student}: refused ({exc.message})")
            continue
        purchases[student] = started.purchase.id
        steps.append(f"{student}: seat held by purchase {started.purchase.id}")
    again = engine.purchases.start(
        operation_id=f"demo-{run}-op-1", intensive_id=intensive_id, student_id="student-1"
    )
    steps.append(f"student-1 retries the same operation id: same purchase ({again.purchase.id})")
    try:
        engine.purchases.start(
            operation_id=f"demo-{run}-op-1", intensive_id=intensive_id, student_id="student-9"
        )
    except ConflictError as exc:
        steps.append(f"operation id reused for another student: conflict ({exc.message})")
    paid = {"amount_minor": intensive.price_minor, "currency": intensive.currency}
    engine.sagas.fire(purchases["student-1"], "payment_succeeded", payload=paid, actor="demo")
    steps.append("student-1 pays: confirmed, seat taken")
    engine.sagas.fire(purchases["student-2"], "payment_failed", actor="demo", cause="declined")
    steps.append("student-2's payment is declined: cancelled, seat freed")
    started = engine.purchases.start(
        operation_id=f"demo-{run}-op-4", intensive_id=intensive_id, student_id="student-4"
    )
    steps.append(
        f"student-4 retries its operation id: the freed seat is held ({started.purchase.state})"
    )
    engine.purchases.cancel(purchases["student-1"], reason="demo: changed plans", actor="demo")
    steps.append("student-1 cancels after paying: refund pending, seat freed")
    states = Counter(p.state for p in engine.purchases.list(intensive_id=intensive_id))
    return {
        "intensive": engine.catalogue.get(intensive_id).to_json(),
        "states": dict(sorted(states.items())),
        "steps": steps,
    }
