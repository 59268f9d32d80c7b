"""
Contract: a route that observes before it applies, on every backend.

The message is a hint: the observer asks the source of truth (here an
e-signature service, by the saga's id) outside any transaction, and the
effect rests on its answer alone.  Where the message said otherwise the
disagreement is kept as evidence and changes nothing the answer does not
back.  No answer records nothing; duplicates, conflicts and messages of no
saga ask nobody.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from saga import Application, Engine, Message, Registry, Route, by_saga_id
from saga.cli import main
from saga.codec import load_json
from saga.core.messages.inbox import Applied, Inbox, Observed
from saga.core.sagas.transitions import fire_in
from saga.examples.approvals import app as approvals_app
from saga.examples.approvals import approval
from saga.exceptions import ProviderUnavailable
from tests import schemas
from tests.helpers import dump, scalar
from tests.purchases import cli_json


class SigningService:
    """The source of truth: who signed what, as the e-signature service knows it."""

    def __init__(self) -> None:
        self.signed: dict[str, str] = {}
        self.asked: list[str] = []
        self.down = False


class AskTheService:
    """Observe before apply: approve only what the service says was signed, by whom it says."""

    def __init__(self, service: SigningService, *, outcome: str | None = None) -> None:
        self.service = service
        self.outcome = outcome

    def observe(self, engine: Any, saga_id: str, message: Message) -> Observed[str | None]:
        del engine
        self.service.asked.append(saga_id)
        if self.service.down:
            raise ProviderUnavailable(operation=f"signature of {saga_id}", error="timed out")
        signer = self.service.signed.get(saga_id)
        said = message.payload.get("signature")
        disagreements = (
            () if said == signer else (f"the message says {said}, the service {signer}",)
        )
        return Observed(
            saga_id=saga_id,
            value=signer,
            evidence={"signer": signer},
            disagreements=disagreements,
        )

    def apply(
        self, tx: Any, registry: Registry, observation: Observed[str | None], *, event_id: str
    ) -> Applied:
        if self.outcome is not None:
            return Applied(self.outcome)
        if observation.value is None:
            return Applied("absorbed")  # nothing signed: nothing to apply
        fired = fire_in(
            tx,
            registry,
            observation.saga_id,
            "approve",
            payload={"signature": observation.value, "event_id": event_id},
            actor="esign",
            cause=f"signature {event_id}",
        )
        return Applied("absorbed" if fired.absorbed else "applied", evidence={"checked": True})


def _app(service: SigningService, **observer: Any) -> Application:
    registry = Registry()
    registry.register(approval, steps=approvals_app.registry.get("approval").steps)
    route = Route(
        source="esign",
        type="document.signed",
        correlate=by_saga_id("reference"),
        observe=AskTheService(service, **observer),
    )
    return Application(name="observed", registry=registry, routes=(route,))


@pytest.fixture
def service():
    return SigningService()


@pytest.fixture
def observed(db_url, service):
    with Engine(db_url, app=_app(service), check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=_app(service)) as engine:
        yield engine


def signed(event_id: str, reference: str, signature: str = "ann") -> Message:
    return Message(
        source="esign",
        event_id=event_id,
        type="document.signed",
        payload={"reference": reference, "signature": signature},
    )


def _start(engine: Engine) -> str:
    return engine.sagas.start("approval", operation_id="doc-1", request={}).saga.id


def _evidence(engine: Engine, event_id: str) -> Any:
    raw = scalar(engine, "SELECT evidence FROM inbox_messages WHERE event_id = :e", e=event_id)
    return load_json(raw) if isinstance(raw, str) else raw


def test_the_effect_rests_on_what_was_observed(observed, service):
    """The message says mallory signed; the service says ann: ann's signature is applied."""
    saga_id = _start(observed)
    service.signed[saga_id] = "ann"
    delivery = observed.messages.deliver(signed("sig-1", saga_id, "mallory"), via="http")
    assert ("applied", "approved") == (delivery.outcome, delivery.state)
    assert "ann" == observed.sagas.history(saga_id)[-1].payload["signature"]
    expected = {
        "observed": {"signer": "ann"},
        "disagreements": ["the message says mallory, the service ann"],
        "checked": True,
    }
    assert expected == delivery.to_json()["evidence"] == _evidence(observed, "sig-1")
    assert "the message says mallory, the service ann" == delivery.detail
    assert "http" == scalar(observed, "SELECT via FROM inbox_messages WHERE event_id = 'sig-1'")


def test_a_disagreement_the_source_does_not_back_changes_nothing(observed, service):
    """Nothing signed at the service: the saga stays; the claim is kept as evidence."""
    saga_id = _start(observed)
    delivery = observed.messages.deliver(signed("sig-1", saga_id))
    assert ("absorbed", "submitted") == (delivery.outcome, delivery.state)
    assert ["the message says ann, the service None"] == _evidence(observed, "sig-1")[
        "disagreements"
    ]


def test_no_answer_records_nothing(observed, service):
    """The source cannot be asked: the error goes to the sender, the database is untouched."""
    saga_id = _start(observed)
    service.down = True
    before = dump(observed)
    with pytest.raises(ProviderUnavailable):
        observed.messages.deliver(signed("sig-1", saga_id))
    assert before == dump(observed)
    service.down = False
    service.signed[saga_id] = "ann"
    assert "applied" == observed.messages.deliver(signed("sig-1", saga_id)).outcome


def test_repeats_conflicts_and_unmatched_messages_ask_nobody(observed, service):
    """Only a message that can still apply is observed, once."""
    saga_id = _start(observed)
    service.signed[saga_id] = "ann"
    observed.messages.deliver(signed("sig-1", saga_id))
    assert [saga_id] == service.asked
    again = observed.messages.deliver(signed("sig-1", saga_id))
    assert (True, "applied") == (again.duplicate, again.outcome)
    assert observed.messages.deliver(signed("sig-1", saga_id, "bob")).conflict
    assert "unmatched" == observed.messages.deliver(signed("sig-2", "no-such-saga")).outcome
    assert [saga_id] == service.asked


def test_an_observer_outcome_outside_the_inbox_s_is_refused(sqlite_url, service):
    """A typo in an observer's outcome rolls the delivery back, nothing recorded."""
    with Engine(sqlite_url, app=_app(service, outcome="done")) as engine:
        saga_id = _start(engine)
        with pytest.raises(ValueError, match="not 'done'"):
            engine.messages.deliver(signed("sig-1", saga_id))
        assert 0 == scalar(engine, "SELECT count(*) FROM inbox_messages")


def test_a_route_needs_an_event_or_an_observer():
    """A route with neither could apply nothing: refused where it is written."""
    with pytest.raises(ValueError, match="needs an event or an observer"):
        Route(source="esign", type="document.signed", correlate=by_saga_id("reference"))


def test_an_observed_route_needs_an_engine_to_ask_through(observed, service):
    """The observer asks through the engine's services: an inbox without one is refused."""
    route = _app(service).routes[0]
    with pytest.raises(ValueError, match="needs an engine"):
        Inbox(observed.db, observed.registry, (route,))


def test_the_application_check_leaves_an_observed_route_s_event_to_its_observer(
    sqlite_url, service
):
    """No fixed event to check: an observed route passes the check its fixed routes get."""
    with Engine(sqlite_url, app=_app(service)) as engine:
        assert [] == engine.app.problems(engine)


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def test_the_provider_s_events_take_either_door_into_one_inbox(shop, db_url, capsys):
    """`webhook deliver` and `messages deliver --source provider` meet on one key."""
    from tests.integration.test_webhook_endpoint import paid_at_provider

    purchase, payment_id = paid_at_provider(shop)
    event = {"payment_id": payment_id, "amount_minor": 4900, "currency": "EUR"}
    code, shown = cli_json(
        capsys,
        *("messages", "deliver", "--source", "provider", "--type", "payment.succeeded"),
        *("--event-id", "evt_1", "--payload", json.dumps(event), "--db", db_url),
    )
    assert (0, "applied", "confirmed") == (code, shown["outcome"], shown["state"])
    assert {"found": True, "status": "succeeded"}.items() <= shown["evidence"]["observed"][
        "payment"
    ].items()
    code, again = cli_json(
        capsys,
        *("webhook", "deliver", "--event-id", "evt_1", "--type", "payment.succeeded"),
        *("--payment", payment_id, "--amount", "49.00", "--currency", "EUR", "--db", db_url),
    )
    assert (0, True, purchase.id) == (code, again["duplicate"], again["saga_id"])
    assert 1 == scalar(shop, "SELECT count(*) FROM inbox_messages WHERE source = 'provider'")


def test_a_malformed_provider_message_is_bad_input_and_records_nothing(shop, db_url, capsys):
    """The route reads the provider's fields: one missing names itself, exit 2."""
    code = main(
        [
            *("messages", "deliver", "--source", "provider", "--type", "payment.failed"),
            *("--event-id", "evt_1", "--payload", '{"amount_minor": 1}', "--db", db_url),
        ]
    )
    assert 2 == code
    assert "payment_id" in capsys.readouterr().err
    assert 0 == scalar(shop, "SELECT count(*) FROM inbox_messages")
