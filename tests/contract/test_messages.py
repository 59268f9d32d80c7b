"""
Contract: the engine's inbox applies an application's messages once, on every backend.

Routed by (source, type) to a saga event; deduplicated by (source, event id)
in the effect's transaction; the same id with other content is a recorded
conflict; an unmatched message is kept and matched when it comes again; a
route to an event no saga declares is refused when the application is checked.
"""

from __future__ import annotations

import pytest

from saga import Application, Engine, Message, Registry, Route, by_saga_id
from saga.examples.approvals import app, approval
from saga.exceptions import ApplicationError, InvalidInput
from tests import schemas
from tests.helpers import dump, scalar
from tests.purchases import cli_json


@pytest.fixture
def approvals(db_url):
    with Engine(db_url, app=app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=app) as engine:
        yield engine


def signed(event_id, reference, signature="ann"):
    return Message(
        source="esign",
        event_id=event_id,
        type="document.signed",
        payload={"reference": reference, "signature": signature},
    )


def test_a_message_becomes_its_routes_event(approvals):
    """document.signed with the saga's id: approve, with the message's payload."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    delivery = approvals.messages.deliver(signed("sig-1", saga.id))
    assert ("applied", "approved") == (delivery.outcome, delivery.state)
    last = approvals.sagas.history(saga.id)[-1]
    assert ("esign", "sig-1") == (last.actor, last.payload["event_id"])


def test_a_repeat_changes_nothing(approvals):
    """The same (source, event id) again: a duplicate, the database untouched."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    approvals.messages.deliver(signed("sig-1", saga.id))
    before = dump(approvals)
    again = approvals.messages.deliver(signed("sig-1", saga.id))
    assert (True, "applied", "approved") == (again.duplicate, again.outcome, again.state)
    assert before == dump(approvals)


def test_the_same_id_with_other_content_is_a_recorded_conflict(approvals):
    """Other content under a seen id: recorded, never applied."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    approvals.messages.deliver(signed("sig-1", saga.id, signature=""))  # guard fails: refused
    conflict = approvals.messages.deliver(signed("sig-1", saga.id, signature="ann"))
    assert conflict.conflict
    assert "submitted" == approvals.sagas.get(saga.id).state
    assert 1 == scalar(approvals, "SELECT count(*) FROM inbox_message_conflicts")


def test_an_unmatched_message_is_kept_and_matched_when_it_comes_again(approvals):
    """No saga yet: kept as unmatched; delivered again once the saga exists, it applies."""
    early = approvals.messages.deliver(signed("sig-1", "not-yet"))
    assert "unmatched" == early.outcome
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    late = Message(
        source="esign",
        event_id="sig-2",
        type="document.refused",
        payload={"reference": saga.id},
    )
    assert ("applied", "rejected") == (
        approvals.messages.deliver(late).outcome,
        approvals.sagas.get(saga.id).state,
    )
    assert "unmatched" == approvals.messages.deliver(signed("sig-1", "not-yet")).outcome


def test_a_late_message_is_absorbed_by_a_final_state(approvals):
    """Signed after the refusal: the final state absorbs it; state never regresses."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    refused = Message(
        source="esign", event_id="r-1", type="document.refused", payload={"reference": saga.id}
    )
    approvals.messages.deliver(refused)
    late = approvals.messages.deliver(signed("sig-9", saga.id))
    assert ("absorbed", "rejected") == (late.outcome, late.state)


def test_a_message_with_no_route_is_bad_input(approvals):
    """An unknown type names the routes, and records nothing."""
    with pytest.raises(InvalidInput, match=r"esign/document\.signed"):
        approvals.messages.deliver(Message(source="esign", event_id="x", type="document.lost"))
    assert 0 == scalar(approvals, "SELECT count(*) FROM inbox_messages")


def test_a_route_to_an_undeclared_event_is_refused(sqlite_url):
    """The application check names the route and its event."""
    registry = Registry()
    registry.register(approval, steps=app.registry.get("approval").steps)
    wrong = Route(source="esign", type="x", correlate=by_saga_id("reference"), event="teleport")
    with pytest.raises(ApplicationError, match="teleport"):
        Engine(sqlite_url, app=Application(name="bad", registry=registry, routes=(wrong,)))


def test_the_cli_delivers_with_exit_codes(approvals, db_url, capsys):
    """messages deliver: 0 applied or duplicate, 4 unmatched, 3 conflict, 2 bad payload."""
    saga = approvals.sagas.start("approval", operation_id="doc-1", request={}).saga
    base = ("messages", "deliver", "--source", "esign", "--type", "document.signed")
    tail = ("--app", "saga.examples.approvals:app", "--db", db_url)
    payload = f'{{"reference": "{saga.id}", "signature": "ann"}}'
    code, shown = cli_json(capsys, *base, "--event-id", "e1", "--payload", payload, *tail)
    assert (0, "applied") == (code, shown["outcome"])
    assert 4 == cli_json(capsys, *base, "--event-id", "e2", "--payload", "{}", *tail)[0]
    assert 3 == cli_json(capsys, *base, "--event-id", "e1", "--payload", "{}", *tail)[0]
    assert 2 == cli_json(capsys, *base, "--event-id", "e3", "--payload", "[]", *tail)[0]
