"""
The operators' console: the reconciliation queue, dead letters, sagas, an overview.

Server-side templates, no JavaScript.  Every page needs a signed-in operator
(:mod:`saga.web.guard`); every form carries the session's CSRF token; only the
``operator`` role acts.  Each action calls the same engine method as the CLI
(``engine.recon.assign``/``resolve``, ``DeadLetters.replay``), with the
signed-in operator as the audit actor: the same rules, the same refusals.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flask import Blueprint, current_app, flash, g, redirect, render_template, request, url_for

from saga import validation
from saga.codec import as_utc
from saga.core.ops.stats import activity
from saga.core.ops.stats import collect as collect_stats
from saga.core.queue.dead_letters import DeadLetters, Filter
from saga.core.recon.items import Decision
from saga.core.sagas.explain import explain
from saga.core.store.records import SagaRecord
from saga.exceptions import ConflictError, InvalidInput, NotFound, ProviderUnavailable, SagaError
from saga.web import guard
from saga.web.charts import activity_chart

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from werkzeug.wrappers import Response

    from saga.core.engine import Engine
    from saga.core.sagas.money import MoneySummary

blueprint = Blueprint(
    "console",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/console-static",
)
blueprint.before_app_request(guard.load_session)

_MAX_ROWS = 500
SAGAS_PER_PAGE = 100


def engine() -> Engine:
    """The engine the application was made for."""
    found: Engine = current_app.extensions["saga_engine"]
    return found


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


def money_of(saga_ids: list[str]) -> Mapping[str, MoneySummary]:
    """The application's money summaries of these sagas (none for sagas without money)."""
    return engine().app.money(engine(), list(dict.fromkeys(saga_ids)))


def database_now() -> datetime:
    """The database clock, for ages and deadlines on a page."""
    value = engine().db.transaction(lambda tx: tx.scalar("db_now"), write=False)
    return as_utc(value)


# -- overview -------------------------------------------------------------------------


@blueprint.get("/")
@guard.signed_in
def overview() -> str:
    """The ``saga stats`` figures and the last hour's chart."""
    stats = collect_stats(engine().db)
    return render_template(
        "overview.html", stats=stats, chart=activity_chart(activity(engine().db))
    )


# -- reconciliation -------------------------------------------------------------------


@blueprint.get("/recon")
@guard.signed_in
def recon_list() -> str:
    """Open items by age and deadline, filtered by reason, owner, overdue."""
    status = request.args.get("status", "open")
    owner = request.args.get("owner") or None
    reason = request.args.get("reason") or None
    overdue = request.args.get("overdue") == "1"
    items = engine().recon.find(
        status=None if status == "all" else status, owner=owner, overdue=overdue, limit=_MAX_ROWS
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


@blueprint.get("/recon/<item_id>")
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


@blueprint.post("/recon/<item_id>/assign")
@guard.acting
def recon_assign(item_id: str) -> Response:
    """Take the item (the signed-in operator becomes its owner)."""
    with _refusals():
        item = engine().recon.assign(
            item_id, operator=g.session.operator.name, expected_version=_version()
        )
        flash(f"item {item.id} is now yours (version {item.version})", "ok")
    return redirect(url_for("console.recon_item", item_id=item_id))


@blueprint.post("/recon/<item_id>/resolve")
@guard.acting
def recon_resolve(item_id: str) -> Response:
    """Decide the item after the provider is asked again (refused if it disagrees)."""
    with _refusals():
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


class _refusals:  # noqa: N801 - used as a statement: `with _refusals():`
    """Turn the engine's refusals into a message on the page; nothing was changed."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, InvalidInput):
            flash(f"refused: {exc.field}: {exc.problem}; nothing was changed", "error")
            return True
        if isinstance(exc, ConflictError | NotFound | ProviderUnavailable):
            flash(f"refused: {exc.message}", "error")
            return True
        return False


# -- dead letters ---------------------------------------------------------------------


@blueprint.get("/dlq")
@guard.signed_in
def dead_letters() -> str:
    """Dead letters by queue, kind and reason, with their last error."""
    where = Filter(queue=request.args.get("queue") or None, kind=request.args.get("kind") or None)
    reason = request.args.get("reason") or None
    letters = DeadLetters(engine().db).find(where, limit=_MAX_ROWS)
    reasons = sorted({letter.error_class or "" for letter in letters})
    if reason is not None:
        letters = [letter for letter in letters if letter.error_class == reason]
    return render_template(
        "dlq.html",
        letters=letters,
        reasons=reasons,
        filters={"queue": where.queue, "kind": where.kind, "reason": reason},
    )


@blueprint.post("/dlq/replay")
@guard.acting
def dead_letters_replay() -> Response:
    """Replay one dead letter, or every one of a queue/kind, at a rate; or only list them."""
    form = request.form
    dry_run = form.get("dry_run") == "1"
    with _refusals():
        job_id = form.get("job") or None
        if job_id is None and not (form.get("queue") or form.get("kind") or form.get("all")):
            raise InvalidInput(field="job", problem="name a job, or a queue or kind, or all")
        report = DeadLetters(engine().db).replay(
            Filter(job_id=job_id, queue=form.get("queue") or None, kind=form.get("kind") or None),
            actor=f"operator:{g.session.operator.name}",
            reason=form.get("reason") or None,
            batch=_whole(form.get("batch"), default=100, field="batch"),
            rate=_rate(form.get("rate")),
            dry_run=dry_run,
        )
        verb = "would replay" if dry_run else "replayed"
        flash(
            f"{verb} {len(report.replayed)} dead letter(s)"
            + (f": {', '.join(report.replayed[:20])}" if report.replayed else "")
            + (f"; skipped {len(report.skipped)} already resolved" if report.skipped else ""),
            "ok",
        )
    return redirect(url_for("console.dead_letters"))


def _whole(text: str | None, *, default: int, field: str) -> int:
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise InvalidInput(field=field, problem=f"{text!r} is not a whole number from 1 to 10000")
    return int(text)


def _rate(text: str | None) -> float | None:
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate <= 10_000:
        raise InvalidInput(field="rate", problem=f"{text!r} is not a rate in jobs per second")
    return rate


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
    with _refusals():
        page = _whole(request.args.get("page"), default=1, field="page")
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
    with _refusals():
        attempts = guard.operators().attempts(outcome=outcome, limit=_MAX_ROWS)
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
