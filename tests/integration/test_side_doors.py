"""
Every door checks who may fire an event, on SQLite and PostgreSQL.

A reconciliation outcome (the purchase's ``resolve_paid``, the enrollment's
``resolve_sent``) moves a saga only through ``recon resolve`` and its judge
(or the checker): ``saga instances fire``, the Python API, an inbox route and
the console are refused, nothing changes, and the refusal is kept where an
operator sees it (``instances show``, the item's trail in ``recon show``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest

from saga import Application, Engine, Message, Route, by_saga_id
from saga.cli import main
from saga.core.app_loading import default_app
from saga.core.messages.inbox import Inbox
from saga.examples import enrollment as enrollment_app
from saga.examples.enrollment_esign import sandbox_for
from saga.exceptions import ApplicationError, EventRefused, InvalidInput
from saga.sagas import RECONCILIATION
from saga.web import create_app
from tests import recon_kinds_app, schemas
from tests.helpers import count_rows, dump
from tests.purchases import cli_json

ENROLLMENT = ("--app", "saga.examples.enrollment:app")


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


@pytest.fixture
def school(db_url):
    with Engine(db_url, app=enrollment_app.app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=enrollment_app.app) as engine:
        yield engine
        shutil.rmtree(sandbox_for(engine).folder, ignore_errors=True)


def unknown_purchase(shop):
    """A purchase whose payment outcome is unknown: in reconciliation, with an open item."""
    purchase = shop.services.purchases.start(
        operation_id="op-1", intensive_id="js", student_id="s-1", hold_seconds=600
    ).purchase
    shop.sagas.fire(purchase.id, "payment_outcome_unknown", actor="worker")
    (item,) = shop.recon.find()
    return purchase.id, item


def unknown_enrollment(school):
    saga = school.sagas.start(
        "enrollment", operation_id="e-ann", request={"student": "ann", "sign_seconds": 600}
    ).saga
    school.sagas.fire(saga.id, "send_unknown", actor="worker", cause="timed out")
    (item,) = school.recon.find()
    return saga.id, item


def saga_cli(capsys, *argv):
    """Run `saga …` in-process: the exit code and what it wrote to stdout and stderr."""
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr()


def business(engine):
    """Every table but the audit trails, which gain the refusal."""
    return {table: rows for table, rows in dump(engine).items() if table != "recon_events"}


def refusals(engine):
    return count_rows(engine, "event_refusals")


def refused_on_item(engine, item_id):
    _, trail = engine.recon.show(item_id)
    return [(e["actor"], e["detail"]["decision"]) for e in trail if e["action"] == "refused"]


# -- the CLI --------------------------------------------------------------------------------


def test_instances_fire_cannot_confirm_a_purchase_in_reconciliation(shop, db_url, capsys):
    """The issue's door: exit 3 naming `saga recon resolve`, nothing moved, the refusal kept."""
    saga_id, item = unknown_purchase(shop)
    before = business(shop)
    fire = ("instances", "fire", saga_id, "resolve_paid", "--actor", "mallory")
    code, said = saga_cli(capsys, *fire, "--reason", "forced", "--db", db_url)
    err = said.err
    assert 3 == code
    assert f"saga recon resolve {item.id} --outcome paid" in err
    assert before == business(shop)  # sagas, seats, money, access, items: as they were
    assert "open" == shop.recon.show(item.id)[0].status
    assert 1 == refusals(shop)
    code, shown = cli_json(capsys, "instances", "show", saga_id, "--db", db_url)
    assert (0, [("resolve_paid", "operator", "operator:mallory")]) == (
        code,
        [(r["event"], r["origin"], r["actor"]) for r in shown["refused"]],
    )
    assert [("operator:mallory", "fire resolve_paid (operator)")] == refused_on_item(shop, item.id)


def test_instances_fire_cannot_forge_a_timer_or_provider_answer(shop, db_url, capsys):
    """A forged expiry saying "paid", or a forged payment, would confirm: refused to operators."""
    purchase = shop.services.purchases.start(
        operation_id="op-2", intensive_id="js", student_id="s-2", hold_seconds=600
    ).purchase
    paid = json.dumps({"provider_status": "paid", "amount_minor": 4900, "currency": "EUR"})
    for event in ("hold_expired", "payment_succeeded"):
        fire = ("instances", "fire", purchase.id, event, "--payload", paid, "--actor", "mallory")
        code, said = saga_cli(capsys, *fire, "--reason", "forced", "--db", db_url)
        assert 3 == code
        assert "only " in said.err
    assert "reserved" == shop.sagas.get(purchase.id).state
    assert 2 == refusals(shop)
    # The operator's own event still goes through.
    cancel = ("instances", "cancel", purchase.id, "--actor", "ann", "--reason", "asked")
    assert 0 == cli_json(capsys, *cancel, "--db", db_url)[0]


def test_instances_fire_refuses_a_users_reconciliation_outcome(school, db_url, capsys):
    """The enrollment declares no origins: its policy's outcomes are reconciliation's alone."""
    saga_id, item = unknown_enrollment(school)
    fire = ("instances", "fire", saga_id, "resolve_sent", "--actor", "mallory", "--reason", "x")
    code, said = saga_cli(capsys, *fire, *ENROLLMENT, "--db", db_url)
    assert 3 == code
    assert f"saga recon resolve {item.id} --outcome sent" in said.err
    assert "needs_reconciliation" == school.sagas.get(saga_id).state
    assert 1 == refusals(school)
    assert [("operator:mallory", "fire resolve_sent (operator)")] == refused_on_item(
        school, item.id
    )


def test_events_a_machine_does_not_name_stay_open_to_operators(school, db_url, capsys):
    """An existing application keeps working: its other events are fired as before."""
    saga = school.sagas.start(
        "enrollment", operation_id="e-bob", request={"student": "bob", "sign_seconds": 600}
    ).saga
    fire = ("instances", "fire", saga.id, "cancel", "--actor", "ann", "--reason", "asked")
    code, shown = cli_json(capsys, *fire, *ENROLLMENT, "--db", db_url)
    assert (0, "withdrawn") == (code, shown["state"])
    assert 0 == refusals(school)


# -- the Python API -------------------------------------------------------------------------


@pytest.mark.parametrize("door", ["sagas", "instances"])
def test_the_python_api_refuses_the_side_door(shop, door):
    saga_id, item = unknown_purchase(shop)
    fire = (
        (lambda: shop.sagas.fire(saga_id, "resolve_paid", actor="script"))
        if door == "sagas"
        else (
            lambda: shop.instances.fire(
                saga_id, "resolve_paid", payload=None, actor="eve", reason="x"
            )
        )
    )
    with pytest.raises(EventRefused, match="saga recon resolve"):
        fire()
    with pytest.raises(InvalidInput, match=r"engine\.recon\.resolve"):
        shop.sagas.fire(saga_id, "resolve_paid", actor="script", origin=RECONCILIATION)
    assert "needs_reconciliation" == shop.sagas.get(saga_id).state
    assert 1 == refusals(shop)
    assert 1 == len(refused_on_item(shop, item.id))


def test_the_python_api_refuses_a_users_outcome(school):
    saga_id, _ = unknown_enrollment(school)
    with pytest.raises(EventRefused):
        school.sagas.fire(saga_id, "resolve_not_sent", actor="script")
    assert "needs_reconciliation" == school.sagas.get(saga_id).state
    assert 1 == refusals(school)


# -- routes ---------------------------------------------------------------------------------

FORGED = Route(source="bank", type="paid", correlate=by_saga_id("reference"), event="resolve_paid")


def test_a_route_cannot_fire_a_reconciliation_outcome(shop):
    """A message routed to an outcome is recorded, not applied; the refusal is kept."""
    saga_id, item = unknown_purchase(shop)
    inbox = Inbox(shop.db, shop.registry, (FORGED,))
    delivered = inbox.deliver(
        Message(source="bank", event_id="b-1", type="paid", payload={"reference": saga_id})
    )
    assert ("not_applicable", "needs_reconciliation") == (delivered.outcome, delivered.state)
    assert "only reconciliation may fire it" in delivered.detail
    assert 1 == refusals(shop)
    assert [("bank", "fire resolve_paid (route)")] == refused_on_item(shop, item.id)


def test_a_users_route_to_an_outcome_is_refused(school):
    saga_id, _ = unknown_enrollment(school)
    route = dataclasses.replace(FORGED, event="resolve_sent")
    delivered = Inbox(school.db, school.registry, (route,)).deliver(
        Message(source="bank", event_id="b-1", type="paid", payload={"reference": saga_id})
    )
    assert "not_applicable" == delivered.outcome
    assert "needs_reconciliation" == school.sagas.get(saga_id).state
    assert 1 == refusals(school)


@pytest.mark.parametrize("event", ["resolve_sent", "resolve_not_sent"])
def test_an_application_routing_to_an_outcome_is_refused_when_opened(db_url, event):
    route = dataclasses.replace(FORGED, event=event)
    app = dataclasses.replace(enrollment_app.app, routes=(route,))
    with pytest.raises(ApplicationError, match=f"fires '{event}', which saga 'enrollment' lets"):
        Engine(db_url, app=app, check_schema=False)


def test_the_purchase_cannot_route_to_a_timer_event(db_url):
    route = dataclasses.replace(FORGED, event="hold_expired")
    app = dataclasses.replace(default_app(), routes=(route,))
    with pytest.raises(ApplicationError, match="lets only timer fire"):
        Engine(db_url, app=app, check_schema=False)


# -- the console ----------------------------------------------------------------------------


def no_firing_door(engine, saga_id):
    """The console's POST routes: none fires an event; the guessable ones do not exist."""
    console = create_app(engine, console=True)
    posts = [r.rule for r in console.url_map.iter_rules() if "POST" in (r.methods or ())]
    assert not [r for r in posts if "recon" not in r and ("saga" in r or "fire" in r)]
    client = console.test_client()
    for path in (f"/sagas/{saga_id}/fire", f"/sagas/{saga_id}/events", f"/saga/{saga_id}"):
        assert client.post(path, data={"event": "resolve_paid"}).status_code in (302, 404, 405)
    assert "needs_reconciliation" == engine.sagas.get(saga_id).state


def test_the_console_has_no_door_that_fires_a_purchase_event(shop):
    """The console moves a saga in reconciliation only through the judged resolve form."""
    saga_id, _ = unknown_purchase(shop)
    no_firing_door(shop, saga_id)


def test_the_console_has_no_door_that_fires_a_users_event(school):
    saga_id, _ = unknown_enrollment(school)
    no_firing_door(school, saga_id)


# -- the right door still opens -------------------------------------------------------------


def test_recon_resolve_is_the_door_and_its_judge_decides(school, db_url, capsys):
    _, item = unknown_enrollment(school)
    resolve = ("recon", "resolve", item.id, "--operator", "ann", "--reason", "no envelope")
    code, shown = cli_json(capsys, *resolve, "--outcome", "not_sent", *ENROLLMENT, "--db", db_url)
    assert (0, "withdrawn") == (code, shown["saga_state"])
    assert 0 == refusals(school)


# -- the application check: judges, hooks, observations, a policy per kind ------------------


def test_outcomes_without_a_judge_are_refused_when_opened(db_url):
    """No judge and no word about it: the silent case is refused, naming both ways out."""
    policy = dataclasses.replace(enrollment_app.RECON, judge=None)

    # A service called "judge" is no judge: the policy names its own, nothing is found by name.
    def services(ctx):
        return SimpleNamespace(judge=enrollment_app.EnvelopeJudge(ctx))

    app = dataclasses.replace(enrollment_app.app, recon=policy, services=services)
    with pytest.raises(ApplicationError, match=r"no judge: name one .*unchecked=True"):
        Engine(db_url, app=app, check_schema=False)
    both = dataclasses.replace(recon_kinds_app.EXPENSE_RECON, judge=recon_kinds_app.BankJudge)
    app = dataclasses.replace(recon_kinds_app.app, recon={"expense": both})
    with pytest.raises(ApplicationError, match="choose one"):
        Engine(db_url, app=app, check_schema=False)


@pytest.fixture
def desk(db_url):
    with Engine(db_url, app=recon_kinds_app.app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=recon_kinds_app.app) as engine:
        yield engine


def unknown(engine, kind, event, **data):
    saga = engine.sagas.start(kind, operation_id=f"{kind}-1", request=data).saga
    engine.sagas.fire(saga.id, event, actor="worker")
    (item,) = [i for i in engine.recon.find() if i.saga_id == saga.id]
    return saga.id, item


def test_each_kind_has_its_own_unknown_state_outcomes_and_judge(desk, db_url, capsys):
    """Two kinds, two policies; neither registers a ReconHook: the engine opens their items."""
    payout, payout_item = unknown(desk, "payout", "transfer_unknown", bank="processing")
    expense, expense_item = unknown(desk, "expense", "lost")
    assert ["transfer", "approval"] == [payout_item.subject, expense_item.subject]
    states = [desk.recon.policy_for(kind).state for kind in ("payout", "expense")]
    assert ["payout_unknown", "expense_limbo"] == states
    app = ("--app", "tests.recon_kinds_app:app", "--db", db_url)
    by_ann = ("--operator", "ann", "--reason", "statement", *app)
    # Another kind's outcome: exit 2, naming this kind's.
    code, said = saga_cli(
        capsys, "recon", "resolve", payout_item.id, "--outcome", "approved", *by_ann
    )
    assert (2, True) == (code, "paid | failed" in said.err)
    # The payout's judge asks the bank, which says processing: refused.
    code, said = saga_cli(capsys, "recon", "resolve", payout_item.id, "--outcome", "paid", *by_ann)
    assert (3, True) == (code, "the bank says processing" in said.err)
    assert "payout_unknown" == desk.sagas.get(payout).state
    # The expense's policy says unchecked: applied, and said so, on the record too.
    code, said = saga_cli(
        capsys, "recon", "resolve", expense_item.id, "--outcome", "approved", *by_ann
    )
    assert 0 == code
    assert "not checked" in said.out
    assert "approved" == desk.sagas.get(expense).state
    _, trail = desk.recon.show(expense_item.id)
    assert "unchecked" in [e["action"] for e in trail]
    code, shown = cli_json(
        capsys, "recon", "resolve", payout_item.id, "--outcome", "failed", *by_ann
    )
    assert (0, True, "failed") == (code, shown["checked"], shown["saga_state"])


def test_a_hook_without_a_policy_is_refused(db_url):
    """A ReconHook whose kind has no policy would open items no one can resolve."""
    from saga import Registry
    from saga.recon import ReconHook

    registry = Registry()
    registry.register(recon_kinds_app.PAYOUT, hooks=[ReconHook(recon_kinds_app.PAYOUT_RECON)])
    app = Application(name="half", registry=registry)
    with pytest.raises(ApplicationError, match="declares no reconciliation policy"):
        Engine(db_url, app=app, check_schema=False)


def test_a_policy_for_no_kind_or_no_state_is_refused(db_url):
    recon = {"payot": recon_kinds_app.PAYOUT_RECON, "expense": recon_kinds_app.PAYOUT_RECON}
    app = dataclasses.replace(recon_kinds_app.app, recon=recon)
    with pytest.raises(ApplicationError) as refused:
        Engine(db_url, app=app, check_schema=False)
    assert "'payot', which is no saga kind" in refused.value.message
    assert "its machine has no state 'payout_unknown'" in refused.value.message


def test_a_single_policy_whose_state_no_kind_has_is_refused(db_url):
    policy = dataclasses.replace(enrollment_app.RECON, state="limbo")
    app = dataclasses.replace(enrollment_app.app, recon=policy)
    with pytest.raises(ApplicationError, match="no saga kind has its state 'limbo'"):
        Engine(db_url, app=app, check_schema=False)


def test_an_observation_without_to_json_is_refused_when_opened(db_url):
    """The judge's observe says it returns something with no to_json(): refused at open."""
    policy = dataclasses.replace(recon_kinds_app.PAYOUT_RECON, judge=recon_kinds_app.BareJudge)
    app = dataclasses.replace(recon_kinds_app.app, recon={"payout": policy})
    with pytest.raises(ApplicationError, match=r"observe returns Shrug, which has no to_json"):
        Engine(db_url, app=app, check_schema=False)


def test_an_unannotated_observation_without_to_json_is_refused_at_the_decision(db_url, capsys):
    """Exit 2 naming the protocol, not an AttributeError; nothing applied; audited."""
    with Engine(db_url, app=recon_kinds_app.bad_judge_app, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=recon_kinds_app.bad_judge_app) as engine:
        saga_id, item = unknown(engine, "payout", "transfer_unknown", bank="paid")
        code, said = saga_cli(
            capsys,
            "recon",
            "resolve",
            item.id,
            "--outcome",
            "paid",
            "--operator",
            "ann",
            "--reason",
            "r",
            "--app",
            "tests.recon_kinds_app:bad_judge_app",
            "--db",
            db_url,
        )
        assert 2 == code
        assert "returned a Shrug, which has no to_json()" in said.err
        assert "payout_unknown" == engine.sagas.get(saga_id).state
        _, trail = engine.recon.show(item.id)
        assert "refused" in [e["action"] for e in trail]


def test_a_single_policy_still_covers_the_kinds_with_its_state(db_url):
    """Application(recon=one_policy) covers every kind with its state, judged by its judge."""
    with Engine(db_url, app=enrollment_app.app, check_schema=False) as engine:
        assert ["enrollment"] == list(engine.recon.policies)
        assert engine.recon.policy is enrollment_app.RECON
        assert isinstance(engine.recon.judge_for("enrollment"), enrollment_app.EnvelopeJudge)
