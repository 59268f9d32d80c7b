"""
The operators' console: the reconciliation queue, dead letters, sagas, an overview.

Server-side templates, no JavaScript.  Every page needs a signed-in operator
(:mod:`saga.web.guard`); every form carries the session's CSRF token; only the
``operator`` role acts.  Each action calls the same engine method as the CLI
(``engine.recon.assign``/``resolve``, ``DeadLetters.replay``), with the
signed-in operator as the audit actor: the same rules, the same refusals.

The reconciliation pages are :mod:`saga.web._console_recon`'s, the dead
letters' :mod:`saga.web._console_dlq`'s, what the pages share
:mod:`saga.web._console_shared`'s.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flask import Blueprint, flash, redirect, render_template, request, url_for

from saga import validation
from saga.core.ops.stats import activity
from saga.core.ops.stats import collect as collect_stats
from saga.core.sagas.explain import explain
from saga.core.store.records import SagaRecord
from saga.exceptions import ConflictError, InvalidInput, NotFound, SagaError
from saga.web import _console_dlq, _console_recon, guard
from saga.web._console_shared import MAX_ROWS, engine, money_of, refusals, whole
from saga.web.charts import activity_chart

if TYPE_CHECKING:
    from saga.core.sagas.money import MoneySummary

blueprint = Blueprint(
    "console",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/console-static",
)
blueprint.before_app_request(guard.load_session)
_console_recon.add_pages(blueprint)
_console_dlq.add_pages(blueprint)

SAGAS_PER_PAGE = 100


@blueprint.app_template_filter("pretty")
def pretty(value: Any) -> str:
    """JSON, indented, for evidence and payloads."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@blueprint.app_template_filter("with_amounts")
def with_amounts(value: Any, money: MoneySummary | None) -> Any:
    """
    ``value`` with each ``…_minor`` amount of the saga's currency shown formatted too.

    Evidence and provider answers keep minor units (``4900``); beside the
    money summary an operator reads ``4900 = 49.00 EUR``.  An amount in a
    dict naming another currency is left as it is.
    """
    if money is None:
        return value
    if isinstance(value, list):
        return [with_amounts(entry, money) for entry in value]
    if not isinstance(value, dict):
        return value
    currency = value.get("currency", money.currency)
    shown: dict[str, Any] = {}
    for key, entry in value.items():
        amount = isinstance(entry, int) and not isinstance(entry, bool)
        if amount and str(key).endswith("_minor") and currency == money.currency:
            shown[key] = f"{entry} = {money.format(entry)}"
        else:
            shown[key] = with_amounts(entry, money)
    return shown


@blueprint.app_template_filter("age")
def age(seconds: float) -> str:
    """A duration as people read it: ``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


# -- overview -------------------------------------------------------------------------


@blueprint.get("/")
@guard.signed_in
def overview() -> str:
    """The ``saga stats`` figures and the last hour's chart."""
    stats = collect_stats(engine().db)
    return render_template(
        "overview.html", stats=stats, chart=activity_chart(activity(engine().db))
    )


# -- sagas ----------------------------------------------------------------------------


@blueprint.get("/sagas")
@guard.signed_in
def sagas() -> str:
    """Search by id or operation id; list by kind and state, a page at a time, with the total."""
    query = (request.args.get("q") or "").strip()
    kind = request.args.get("kind") or None
    state = request.args.get("state") or None
    filters = {"q": query, "kind": kind, "state": state}
    kinds = sorted(t.machine.name for t in engine().registry)
    if query:
        found = engine().instances.find(query)
        if found is not None:
            return redirect(url_for("console.saga", saga_id=found))  # type: ignore[return-value]
        flash(f"no saga has the id or operation id {query!r}", "error")
    with refusals():
        page = whole(request.args.get("page"), default=1, field="page")
        if kind is not None:
            validation.one_of("kind", kind, kinds)
        if state is not None:
            validation.identifier("state", state)
        listed, total = _saga_page(kind, state, page)
        return render_template(
            "sagas.html",
            sagas=listed,
            kinds=kinds,
            filters=filters,
            page=page,
            pages=max(1, -(-total // SAGAS_PER_PAGE)),
            total=total,
            per_page=SAGAS_PER_PAGE,
        )
    return render_template(
        "sagas.html", sagas=[], kinds=kinds, filters=filters, page=1, pages=1, total=0, per_page=0
    )


def _saga_page(kind: str | None, state: str | None, page: int) -> tuple[list[SagaRecord], int]:
    def read(tx: Any) -> tuple[list[SagaRecord], int]:
        rows = tx.all(
            "page_of_sagas",
            kind=kind,
            state=state,
            limit=SAGAS_PER_PAGE,
            offset=(page - 1) * SAGAS_PER_PAGE,
        )
        total = int(tx.scalar("count_sagas", kind=kind, state=state) or 0)
        return [SagaRecord.from_row(row) for row in rows], total

    result: tuple[list[SagaRecord], int] = engine().db.transaction(read, write=False)
    return result


@blueprint.get("/sagas/<saga_id>")
@guard.signed_in
def saga(saga_id: str) -> str:
    """One saga's timeline (history, jobs, timers, events in and out) and why it is there."""
    instance = engine().instances.show(saga_id)
    events = engine().instances.events(saga_id)
    # An application that keeps messages of its own shows them here too.
    received = [*events["in"], *engine().app.messages(engine(), saga_id)]
    events["in"] = sorted(received, key=lambda message: str(message["received_at"]))
    return render_template(
        "saga.html",
        instance=instance,
        why=explain(engine().instances, saga_id),
        money=money_of([saga_id]).get(saga_id),
        events=events,
    )


@blueprint.get("/sign-ins")
@guard.signed_in
def sign_ins() -> str:
    """The console's sign-in attempts: accepted, refused, throttled (the throttle's audit)."""
    outcome = request.args.get("outcome") or None
    with refusals():
        attempts = guard.operators().attempts(outcome=outcome, limit=MAX_ROWS)
        return render_template("sign_ins.html", attempts=attempts, outcome=outcome)
    return render_template("sign_ins.html", attempts=[], outcome=None)


@blueprint.errorhandler(NotFound)
def not_found(exc: NotFound) -> tuple[str, int]:
    """An unknown item, job or saga."""
    return render_template("error.html", status=404, message=exc.message), 404


@blueprint.errorhandler(SagaError)
def engine_error(exc: SagaError) -> tuple[str, int]:
    """Anything else the engine refused."""
    status = (
        400 if isinstance(exc, InvalidInput) else 409 if isinstance(exc, ConflictError) else 500
    )
    return render_template("error.html", status=status, message=exc.message), status
