"""An item's deadline is acted on: past it, the item escalates, visibly (issue 7, defect 9)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from saga.core.ops.verify import verify
from saga.core.queue.kinds import Handlers
from saga.core.recon.lifecycle import deadline_kind
from saga.core.workers.worker import Worker
from saga.purchase.steps import PurchaseSteps
from tests.helpers import execute, make_due, saga_jobs
from tests.purchases import cli_json


@pytest.fixture
def item(engine):
    """A checker-owned item for a payment call that timed out."""
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    engine.services.purchases.start(
        operation_id="op-1",
        intensive_id="js",
        student_id="s1",
        payment_method="pm_timeout_before_charge",
        hold_seconds=600,
    )
    kinds = PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter).kinds()
    handlers = Handlers([k for k in kinds if k.name == "purchase.request_payment"])
    Worker(engine.db, handlers, listen=False).run(burst=True)
    (opened,) = engine.recon.find()
    return opened


def pass_deadline(engine, item):
    """Move the database clock past the item's deadline (for this item only)."""
    past = "2000-01-01T00:00:00.000Z" if engine.db.dialect == "sqlite" else "2000-01-01T00:00:00Z"
    execute(engine, "UPDATE recon_items SET deadline = :past WHERE id = :id", past=past, id=item.id)
    make_due(engine, f"recon-deadline:{item.id}")


def test_a_passed_deadline_escalates_the_item_to_the_operators(engine, item):
    """The deadline job marks it overdue, gives it to the operators, and logs it."""
    pass_deadline(engine, item)
    with capture_logs() as logs:
        Worker(engine.db, Handlers([deadline_kind()]), listen=False).run(burst=True)
    (after,) = engine.recon.find()
    assert ("operators", True) == (after.owner, after.overdue_at is not None)
    assert after.escalated_at is not None
    assert [item.id] == [e["item_id"] for e in logs if e["event"] == "recon_item_overdue"]
    assert "overdue" in [e["action"] for e in engine.recon.show(item.id)[1]]
    assert [] == [i.name for i in verify(engine).invariants if i.problems]


def test_overdue_items_show_in_recon_list_and_stats(engine, item, db_url, capsys):
    """recon list --overdue and saga stats count it; the text listing flags it."""
    pass_deadline(engine, item)
    Worker(engine.db, Handlers([deadline_kind()]), listen=False).run(burst=True)
    code, overdue = cli_json(capsys, "recon", "list", "--overdue", "--db", db_url)
    assert (0, [item.id], [True]) == (
        code,
        [i["id"] for i in overdue],
        [i["overdue"] for i in overdue],
    )
    _, stats = cli_json(capsys, "stats", "--db", db_url)
    assert (1, 1) == (stats["reconciliation"]["open"], stats["reconciliation"]["overdue"])


def test_an_item_resolved_in_time_forgets_its_deadline(engine, item):
    """Resolved before the deadline: the escalation job is gone, nothing will fire."""
    engine.recon.resolve(item.id, outcome="not_paid", operator="ann", reason="nothing was taken")
    assert "cancelled" == engine.services.purchases.get(item.saga_id).state
    assert 0 == len(
        [
            j
            for j in saga_jobs(engine, item.saga_id)
            if j["id"] == f"recon-deadline:{item.id}" and j["state"] == "pending"
        ]
    )
