"""The transactional outbox and its relay, on each backend."""

from __future__ import annotations

import json

import pytest

from saga import Engine, Registry
from saga.core.messages.outbox import replay_dead
from saga.core.queue.backoff import Backoff
from saga.events import Consumer, Emit, Event, Relay, Subscribers
from saga.exceptions import ApplicationError, PublishFailed
from saga.ops import verify
from tests import schemas
from tests.helpers import engine_on, execute, rows, scalar
from tests.outbox_app import app, order

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def orders(db_url):
    with engine_on(db_url, app()) as engine:
        yield engine


def place(engine, n=1, *, total=100):
    return [
        engine.sagas.start(
            "order",
            operation_id=f"order-{i}",
            request={"customer_id": f"c-{i}", "total": total, "email": f"c{i}@example.org"},
        ).saga.id
        for i in range(n)
    ]


def outbox(engine):
    return rows(engine, "SELECT * FROM outbox ORDER BY id")


def data(row):
    """An outbox row's JSON fields (a dict on PostgreSQL, text on SQLite)."""
    return row["data"] if isinstance(row["data"], dict) else json.loads(row["data"])


def make_due(engine):
    """Move every outbox row's retry time a day back: its backoff has passed."""
    if engine.db.dialect == "sqlite":
        sql = (
            "UPDATE outbox SET available_at = strftime('%Y-%m-%dT%H:%M:%fZ', "
            "julianday(available_at) - 1.0)"
        )
    else:
        sql = "UPDATE outbox SET available_at = available_at - interval '1 day'"
    execute(engine, sql)


def expire_leases(engine):
    """Move every outbox lease a day back: the database clock says they expired."""
    if engine.db.dialect == "sqlite":
        sql = (
            "UPDATE outbox SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', "
            "julianday(lease_until) - 1.0) WHERE lease_until IS NOT NULL"
        )
    else:
        sql = "UPDATE outbox SET lease_until = lease_until - interval '1 day'"
    execute(engine, sql)


class Collect:
    """An in-process subscriber that keeps what it got (and can be told to fail)."""

    def __init__(self):
        self.events: list[Event] = []
        self.failing = False

    def __call__(self, event):
        if self.failing:
            raise ConnectionError("subscriber down")
        self.events.append(event)


class FixedBackoff(Backoff):
    """An hour, always (the relay's own backoff jitters down to zero)."""

    def delay(self, attempt: int) -> float:
        del attempt
        return 3600.0


def relay_to(engine, subscriber, pattern="#", **options):
    return Relay(engine.db, [Subscribers({pattern: [subscriber]})], **options)


# -- writing -----------------------------------------------------------------------


def test_a_transition_writes_its_declared_event_with_only_the_declared_fields(orders):
    """The event carries the saga's id, kind, version and the declared fields: no email."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    placed, paid = outbox(orders)
    assert (placed["event_id"], placed["type"], placed["saga_version"]) == (
        f"{saga_id}:1:order.placed",
        "order.placed",
        1,
    )
    assert {"customer_id": "c-0", "total": 100} == data(placed)
    assert (paid["type"], paid["saga_kind"], paid["schema_version"]) == ("order.paid", "order", 1)
    assert paid["published_at"] is None


def test_one_declaration_covers_several_states_and_computes_fields(orders):
    """order.closed is emitted on shipping or cancelling, with the outcome computed."""
    first, second = place(orders, 2)
    orders.sagas.fire(first, "cancel", actor="test")
    orders.sagas.fire(second, "pay", actor="test")
    orders.sagas.fire(second, "ship", actor="test")
    closed = [row for row in outbox(orders) if row["type"] == "order.closed"]
    assert [{"outcome": "cancelled"}, {"outcome": "shipped"}] == [data(row) for row in closed]
    assert {2} == {row["schema_version"] for row in closed}


def test_a_rolled_back_transition_leaves_no_outbox_row(db_url):
    """A hook that fails after the event was written undoes the event with the transition."""

    class Refuse:
        def on_create(self, tx, saga):
            pass

        def on_transition(self, tx, before, after, change):
            raise RuntimeError("refused after the write")

    registry = Registry()
    registry.register(order, hooks=[Refuse()], emits=[Emit("order.paid", on="paid")])
    with Engine(db_url, app=app(registry=registry), check_schema=False) as engine:
        schemas.migrate(engine)
        (saga_id,) = place(engine)
        with pytest.raises(RuntimeError, match="refused"):
            engine.sagas.fire(saga_id, "pay", actor="test")
        assert "placed" == engine.sagas.get(saga_id).state
        assert [] == outbox(engine)


def test_an_absorbed_event_writes_nothing(orders):
    """A terminal state absorbing an event moves nothing and publishes nothing."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "cancel", actor="test")
    before = len(outbox(orders))
    orders.sagas.fire(saga_id, "cancel", actor="test")
    assert before == len(outbox(orders))


# -- the application's declarations -------------------------------------------------


def test_an_event_on_an_unknown_state_or_with_a_bad_type_is_refused_with_every_problem(db_url):
    """The application check lists each bad declaration."""
    registry = Registry()
    registry.register(
        order,
        emits=[
            Emit("order.lost", on="lost"),
            Emit("Order Paid", on="paid"),
            Emit("order.paid", on="paid"),
            Emit("order.paid", on=("paid", "placed")),
        ],
    )
    with pytest.raises(ApplicationError) as caught:
        Engine(db_url, app=app(registry=registry))
    problems = "\n".join(caught.value.problems)
    assert "names no state 'lost'" in problems
    assert "'Order Paid': a type is dot-separated" in problems
    assert "event 'order.paid' is declared twice on 'paid'" in problems


# -- the relay --------------------------------------------------------------------------


def test_the_relay_publishes_and_marks_each_event_once(orders):
    """Every event reaches the subscriber; once marked, nothing is claimed again."""
    ids = place(orders, 3)
    got = Collect()
    relay = relay_to(orders, got)
    assert 3 == relay.poll()
    assert 0 == relay.poll()
    assert sorted(f"{i}:1:order.placed" for i in ids) == sorted(e.id for e in got.events)
    assert all(row["published_at"] is not None for row in outbox(orders))
    assert None is relay.next_due_in()


def test_a_sagas_events_are_published_in_order(orders):
    """Only a saga's oldest unpublished event is claimable: one per saga per batch."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    orders.sagas.fire(saga_id, "ship", actor="test")
    got = Collect()
    relay = relay_to(orders, got)
    assert [1, 1, 1, 0] == [relay.poll() for _ in range(4)]
    assert ["order.placed", "order.paid", "order.closed"] == [e.type for e in got.events]
    assert [1, 2, 3] == [e.saga_version for e in got.events]


def test_a_failed_publication_waits_with_backoff_and_holds_back_the_sagas_later_events(orders):
    """Nothing is lost: the event is retried when due, and its successor only after it."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    got = Collect()
    got.failing = True
    # Full jitter may draw a delay near zero: a fixed one keeps the test off the clock.
    relay = relay_to(orders, got, backoff=FixedBackoff())
    assert 1 == relay.poll()
    first = outbox(orders)[0]
    assert (first["published_at"], first["errors"]) == (None, 1)
    assert "ConnectionError: subscriber down" in first["last_error"]
    assert 0 == relay.poll()  # backing off, and order.paid waits behind it
    got.failing = False
    make_due(orders)
    assert [1, 1] == [relay.poll(), relay.poll()]
    assert ["order.placed", "order.paid"] == [e.type for e in got.events]
    assert 1 == relay.report.failed


def test_a_relay_whose_lease_expired_marks_nothing(orders):
    """Fencing: a stale relay's confirmation is ignored; the new owner publishes again."""
    place(orders)
    token = "stale"
    claimed = orders.db.transaction(
        lambda tx: tx.all("claim_outbox", token=token, batch=10, lease_seconds=30)
    )
    expire_leases(orders)
    ids = json.dumps([int(claimed[0]["id"])])
    marked = orders.db.transaction(lambda tx: tx.all("mark_outbox_published", ids=ids, token=token))
    assert [] == list(marked)
    got = Collect()
    assert 1 == relay_to(orders, got).poll()
    assert 1 == len(got.events)


def test_a_relay_with_another_token_marks_nothing(orders):
    """Fencing: only the token that claimed a row can mark it published."""
    place(orders)
    claimed = orders.db.transaction(
        lambda tx: tx.all("claim_outbox", token="mine", batch=10, lease_seconds=30)
    )
    ids = json.dumps([int(claimed[0]["id"])])
    marked = orders.db.transaction(
        lambda tx: tx.all("mark_outbox_published", ids=ids, token="other")
    )
    assert [] == list(marked)
    assert None is outbox(orders)[0]["published_at"]


def test_a_claimed_event_is_not_claimed_again_while_its_lease_holds(orders):
    """A second relay skips what the first holds, and takes it once the lease expired."""
    place(orders)
    first = orders.db.transaction(
        lambda tx: tx.all("claim_outbox", token="a", batch=10, lease_seconds=30)
    )
    second = orders.db.transaction(
        lambda tx: tx.all("claim_outbox", token="b", batch=10, lease_seconds=30)
    )
    assert (1, 0) == (len(first), len(second))
    expire_leases(orders)
    third = orders.db.transaction(
        lambda tx: tx.all("claim_outbox", token="c", batch=10, lease_seconds=30)
    )
    assert 1 == len(third)


def test_a_publisher_confirming_a_prefix_gets_that_prefix_marked(orders):
    """PublishFailed names what the broker confirmed before failing; only that is marked."""
    place(orders, 3)

    class HalfBroker:
        def publish(self, events):
            raise PublishFailed(confirmed=[events[0].id], reason="connection reset")

        def close(self):
            pass

    relay = Relay(orders.db, [HalfBroker()])
    assert 3 == relay.poll()
    published = [row["published_at"] is not None for row in outbox(orders)]
    assert [True, False, False] == published
    assert (1, 2, "connection reset") == (
        relay.report.published,
        relay.report.failed,
        relay.report.errors[-1],
    )


# -- verify -----------------------------------------------------------------------------


def test_verify_catches_a_transition_without_its_declared_event(orders):
    """Deleting an outbox row on purpose breaks the outbox invariant."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    assert verify(orders).ok
    execute(orders, "DELETE FROM outbox WHERE type = 'order.paid'")
    report = verify(orders)
    (rule,) = [r for r in report.invariants if r.name == "outbox"]
    # (With a hint at since=: no transition wrote one, as if it was declared after them.)
    assert [f"saga {saga_id} v2 entered paid without its order.paid event in the outbox"] == [
        problem.split(";")[0] for problem in rule.problems
    ]


def test_verify_does_not_ask_for_events_before_the_prune_horizon(orders):
    """Published rows older than retention's horizon may be gone; later ones may not."""
    (saga_id,) = place(orders)
    execute(orders, "DELETE FROM outbox")
    now = orders.db.transaction(lambda tx: tx.scalar("db_now"), write=False)
    orders.db.transaction(lambda tx: tx.run("advance_prune_horizon", target="outbox", cutoff=now))
    assert verify(orders).ok
    orders.sagas.fire(saga_id, "pay", actor="test")
    execute(orders, "DELETE FROM outbox")
    assert not verify(orders).ok


# -- the consumer inbox -------------------------------------------------------------


class Tally:
    """A consumer whose effect is a list of the events it applied."""

    def __init__(self):
        self.applied = []
        self.consumer = Consumer(name="tally", bindings=("order.*",), apply=self.apply)

    def apply(self, tx, event):
        self.applied.append(event.id)

    def receive(self, db, event):
        return self.consumer.receive(db, event)


@pytest.fixture
def tally():
    return Tally()


def event_of(engine):
    got = Collect()
    relay_to(engine, got).poll()
    return got.events[0]


def test_the_consumer_applies_an_event_once(orders, tally):
    """A redelivered event is a duplicate: its effect happened once."""
    place(orders)
    event = event_of(orders)
    assert ["applied", "duplicate", "duplicate"] == [
        tally.receive(orders.db, event) for _ in range(3)
    ]
    assert [event.id] == tally.applied
    claims = "SELECT count(*) FROM inbox_messages WHERE source = 'consumer.tally'"
    assert 1 == scalar(orders, claims)


def test_the_same_event_id_with_other_content_is_a_recorded_conflict(orders, tally):
    """Other content under a known id is recorded as a conflict and not applied."""
    place(orders)
    event = event_of(orders)
    tally.receive(orders.db, event)
    forged = Event.from_json({**event.to_json(), "data": {"total": 1_000_000}})
    assert "conflict" == tally.receive(orders.db, forged)
    assert [event.id] == tally.applied
    conflicts = rows(orders, "SELECT * FROM inbox_message_conflicts")
    assert [("consumer.tally", event.id)] == [(c["source"], c["event_id"]) for c in conflicts]


def test_an_event_round_trips_through_its_published_body(orders):
    """What a consumer parses is what the relay published."""
    place(orders)
    event = event_of(orders)
    assert event == Event.from_json(json.loads(json.dumps(event.to_json())))
    with pytest.raises(ValueError, match="not an outbox event"):
        Event.from_json({"id": "x"})


# -- dead letters -------------------------------------------------------------------


def test_an_event_refused_again_and_again_is_dead_lettered_and_frees_its_saga(orders):
    """After max_refusals, the event stops blocking its saga; verify names it; replay revives."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    got = []

    def refuse_placed(event):
        if event.type == "order.placed":
            raise ValueError("no schema for order.placed")
        got.append(event.type)

    relay = Relay(orders.db, [Subscribers({"#": [refuse_placed]})], max_refusals=3)
    for _ in range(3):
        make_due(orders)
        relay.poll()
    placed = outbox(orders)[0]
    assert placed["dead_at"] is not None
    assert "ValueError: no schema for order.placed" in placed["last_error"]
    assert 1 == relay.report.dead
    assert 1 == relay.poll()  # order.paid is no longer held back
    assert ["order.paid"] == got
    (liveness,) = [r for r in verify(orders).invariants if r.name == "liveness"]
    (problem,) = liveness.problems
    assert problem.startswith(f"event {placed['event_id']} was dead-lettered: ValueError")
    replayed = replay_dead(orders.db, event_id=None, actor="ann", reason="schema fixed")
    assert [placed["event_id"]] == replayed
    assert (None, 0) == (outbox(orders)[0]["dead_at"], outbox(orders)[0]["errors"])


def test_a_connection_failure_never_dead_letters_an_event(orders):
    """An outage is not the event's fault: it waits for as long as the outage lasts."""
    place(orders)

    class Down:
        def publish(self, events):
            raise ConnectionError("broker down")

        def close(self):
            pass

    relay = Relay(orders.db, [Down()], max_refusals=2)
    for _ in range(5):
        make_due(orders)
        relay.poll()
    (row,) = outbox(orders)
    assert (row["dead_at"], row["errors"]) == (None, 5)


class Recorder:
    """A publisher that confirms everything and remembers it."""

    def __init__(self):
        self.got = []

    def publish(self, events):
        self.got += [event.id for event in events]
        return [event.id for event in events]

    def close(self):
        pass


def test_an_event_is_marked_only_when_every_publisher_took_it(orders):
    """A subscriber refusing one event keeps the broker from none of the others it confirmed."""
    first, second = place(orders, 2)
    broker = Recorder()

    def refuse_second(event):
        if event.saga_id == second:
            raise ValueError("refused")

    relay = Relay(orders.db, [Subscribers({"#": [refuse_second]}), broker])
    relay.poll()
    marked = {row["event_id"] for row in outbox(orders) if row["published_at"] is not None}
    assert marked == {f"{first}:1:order.placed"}
    assert marked <= set(broker.got)


def test_a_refused_event_holds_back_no_other_saga(orders):
    """Only the refused event backs off; the batch's other events go back untouched."""
    first, second = place(orders, 2)

    def refuse_first(event):
        if event.saga_id == first:
            raise ValueError("poison")

    # A backoff of up to an hour: with full jitter the refused event could be
    # due again at once and return the batch's other events untouched once more
    # (it failed 1 run in 5 with the default one-second base).
    hour = Backoff(base=3600.0, cap=3600.0)
    relay = Relay(orders.db, [Subscribers({"#": [refuse_first]})], backoff=hour)
    relay.poll()
    rows_by_saga = {row["saga_id"]: row for row in outbox(orders)}
    assert (1, 1) == (rows_by_saga[first]["errors"], rows_by_saga[first]["refusals"])
    assert (0, None, None) == (
        rows_by_saga[second]["errors"],
        rows_by_saga[second]["last_error"],
        rows_by_saga[second]["lease_token"],
    )
    # The other saga's event goes at once.
    relay.poll()
    published = {row["saga_id"]: row["published_at"] for row in outbox(orders)}
    assert (None, True) == (published[first], published[second] is not None)


def test_outages_do_not_count_as_refusals(orders):
    """Failures of the connection never bring an event closer to its dead letter."""
    place(orders)
    down = True

    class Flaky:
        def publish(self, events):
            if down:
                raise ConnectionError("broker down")
            raise PublishFailed(confirmed=[], reason="nack", rejected=events[0].id)

        def close(self):
            pass

    relay = Relay(orders.db, [Flaky()], max_refusals=2)
    for _ in range(3):
        make_due(orders)
        relay.poll()
    down = False
    make_due(orders)
    relay.poll()
    (row,) = outbox(orders)
    assert (None, 4, 1) == (row["dead_at"], row["errors"], row["refusals"])
    make_due(orders)
    relay.poll()
    assert outbox(orders)[0]["dead_at"] is not None


def test_an_event_waiting_behind_its_sagas_earlier_one_is_not_due(orders):
    """next_due_in follows the claim: the event behind a backing-off one is not due now."""
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    if orders.db.dialect == "sqlite":
        a_day_later = (
            "UPDATE outbox SET available_at = "
            "strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + 1.0) WHERE type = :type"
        )
    else:
        a_day_later = (
            "UPDATE outbox SET available_at = clock_timestamp() + interval '1 day' "
            "WHERE type = :type"
        )
    execute(orders, a_day_later, type="order.placed")
    due = relay_to(orders, Collect()).next_due_in()
    assert due is not None
    assert due > 3600


def test_a_republished_event_is_a_duplicate_whatever_its_time(orders, tally):
    """The consumer compares what an event says, not when it was stamped."""
    place(orders)
    event = event_of(orders)
    tally.receive(orders.db, event)
    later = Event.from_json({**event.to_json(), "occurred_at": "2030-01-01T00:00:00.000Z"})
    assert "duplicate" == tally.receive(orders.db, later)
