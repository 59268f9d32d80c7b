"""
The console's reconciliation pages: the queue, one item, and taking and deciding it.

Each action calls the same engine method as the CLI (``engine.recon.assign``
and ``resolve``), with the signed-in operator as the audit actor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import flash, g, redirect, render_template, request, url_for

from saga.core.recon.items import Decision
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.web import guard
from saga.web._console_shared import MAX_ROWS, database_now, engine, money_of, refusals

if TYPE_CHECKING:
    from flask import Blueprint
    from werkzeug.wrappers import Response


def add_pages(blueprint: Blueprint) -> None:
    """The queue, one item and its two actions, on the console's blueprint."""
    blueprint.get("/recon")(recon_list)
    blueprint.get("/recon/<item_id>")(recon_item)
    blueprint.post("/recon/<item_id>/assign")(recon_assign)
    blueprint.post("/recon/<item_id>/resolve")(recon_resolve)


@guard.signed_in
def recon_list() -> str:
    """Open items by age and deadline, filtered by reason, owner, overdue."""
    status = request.args.get("status", "open")
    owner = request.args.get("owner") or None
    reason = request.args.get("reason") or None
    overdue = request.args.get("overdue") == "1"
    items = engine().recon.find(
        status=None if status == "all" else status, owner=owner, overdue=overdue, limit=MAX_ROWS
    )
    reasons = sorted({item.reason for item in items})
    if reason is not None:
        items = [item for item in items if item.reason == reason]
    return render_template(
        "recon_list.html",
        items=items,
        money=money_of([item.saga_id for item in items]),
        now=database_now(),
        reasons=reasons,
        filters={"status": status, "owner": owner, "reason": reason, "overdue": overdue},
    )


@guard.signed_in
def recon_item(item_id: str) -> str:
    """One item: its evidence, the provider's answer now, the saga's history, the actions."""
    item, events = engine().recon.show(item_id)
    saga = engine().sagas.get(item.saga_id)
    return render_template(
        "recon_item.html",
        item=item,
        events=events,
        saga=saga,
        history=engine().sagas.history(item.saga_id),
        provider=_provider_answer(item, saga.kind),
        money=money_of([item.saga_id]).get(item.saga_id),
        # Each kind has its own policy: this saga's outcomes only, each with
        # when it fits the item's reason.
        outcomes=[
            (outcome, engine().recon.policy_for(saga.kind).hint(outcome, item.reason))
            for outcome in engine().recon.outcomes_for(saga.kind)
        ],
    )


def _provider_answer(item: Any, kind: str) -> dict[str, Any]:
    """What the outside world says now (asked again, as a decision would be)."""
    judge = engine().recon.judge_for(kind)
    if judge is None or item.status != "open":
        return {"asked": False}
    look = Decision(item=item, outcome="look", operator=g.session.operator.name, reason="look")
    try:
        return {"asked": True, "answer": judge.observe(look).to_json()}
    except (ProviderUnavailable, InvalidInput) as exc:
        return {"asked": True, "error": exc.message}


@guard.acting
def recon_assign(item_id: str) -> Response:
    """Take the item (the signed-in operator becomes its owner)."""
    with refusals():
        item = engine().recon.assign(
            item_id, operator=g.session.operator.name, expected_version=_version()
        )
        flash(f"item {item.id} is now yours (version {item.version})", "ok")
    return redirect(url_for("console.recon_item", item_id=item_id))


@guard.acting
def recon_resolve(item_id: str) -> Response:
    """Decide the item after the provider is asked again (refused if it disagrees)."""
    with refusals():
        external_ref = request.form.get("external_ref") or None
        amount_text = request.form.get("amount") or None
        amount = None
        if amount_text is not None:
            if external_ref is None:
                raise InvalidInput(field="amount", problem="goes with an external reference")
            amount = engine().recon.parse_amount(item_id, amount_text)
        item = engine().recon.resolve(
            item_id,
            outcome=request.form.get("outcome", ""),
            operator=g.session.operator.name,
            reason=request.form.get("reason", ""),
            expected_version=_version(),
            external_ref=external_ref,
            amount_minor=amount,
        )
        saga = engine().sagas.get(item.saga_id)
        flash(f"resolved as {item.resolution}; {saga.kind} {saga.id} is now {saga.state}", "ok")
    return redirect(url_for("console.recon_item", item_id=item_id))


def _version() -> int | None:
    text = request.form.get("version", "")
    if not text.isdigit():
        raise InvalidInput(field="version", problem="the form lost the item's version; reload")
    return int(text)
