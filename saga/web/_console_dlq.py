"""
The console's dead letters: listed by queue, kind and reason, and replayed.

A replay calls ``DeadLetters.replay``, as ``saga dlq replay`` does, with the
signed-in operator as the audit actor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import flash, g, redirect, render_template, request, url_for

from saga.core.queue.dead_letters import DeadLetters, Filter
from saga.exceptions import InvalidInput
from saga.web import guard
from saga.web._console_shared import MAX_ROWS, engine, refusals, whole

if TYPE_CHECKING:
    from flask import Blueprint
    from werkzeug.wrappers import Response


def add_pages(blueprint: Blueprint) -> None:
    """The list and the replay, on the console's blueprint."""
    blueprint.get("/dlq")(dead_letters)
    blueprint.post("/dlq/replay")(dead_letters_replay)


@guard.signed_in
def dead_letters() -> str:
    """Dead letters by queue, kind and reason, with their last error."""
    where = Filter(queue=request.args.get("queue") or None, kind=request.args.get("kind") or None)
    reason = request.args.get("reason") or None
    letters = DeadLetters(engine().db).find(where, limit=MAX_ROWS)
    reasons = sorted({letter.error_class or "" for letter in letters})
    if reason is not None:
        letters = [letter for letter in letters if letter.error_class == reason]
    return render_template(
        "dlq.html",
        letters=letters,
        reasons=reasons,
        filters={"queue": where.queue, "kind": where.kind, "reason": reason},
    )


@guard.acting
def dead_letters_replay() -> Response:
    """Replay one dead letter, or every one of a queue/kind, at a rate; or only list them."""
    form = request.form
    dry_run = form.get("dry_run") == "1"
    with refusals():
        job_id = form.get("job") or None
        if job_id is None and not (form.get("queue") or form.get("kind") or form.get("all")):
            raise InvalidInput(field="job", problem="name a job, or a queue or kind, or all")
        report = DeadLetters(engine().db).replay(
            Filter(job_id=job_id, queue=form.get("queue") or None, kind=form.get("kind") or None),
            actor=f"operator:{g.session.operator.name}",
            reason=form.get("reason") or None,
            batch=whole(form.get("batch"), default=100, field="batch"),
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
