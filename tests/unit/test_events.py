"""Pure parts of the outbox: topic patterns, event declarations, event bodies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from saga.core.messages.relay import topic_matches
from saga.events import Emit, Event
from tests.outbox_app import order

words = st.lists(st.sampled_from(["order", "paid", "a", "b"]), min_size=1, max_size=4)


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("order.*", "order.paid", True),
        ("order.*", "order.paid.late", False),
        ("order.#", "order.paid.late", True),
        ("order.#", "order", True),
        ("#", "anything.at.all", True),
        ("*.paid", "order.paid", True),
        ("*.paid", "paid", False),
        ("#.paid", "order.refund.paid", True),
        ("order.paid", "order.placed", False),
    ],
)
def test_topic_patterns_match_like_rabbitmq(pattern, key, matches):
    """* is one word, # is zero or more, as in an AMQP topic exchange."""
    assert matches is topic_matches(pattern, key)


@given(words)
def test_a_key_matches_itself_and_hash(parts):
    """Every routing key matches itself, '#' and its own words with '*' for one of them."""
    key = ".".join(parts)
    assert topic_matches(key, key)
    assert topic_matches("#", key)
    assert topic_matches(".".join(["*", *parts[1:]]), key)


def test_a_declaration_names_its_problems():
    """A bad type, an unknown state and a schema version below 1 are all reported."""
    problems = Emit("Bad Type", on=("placed", "lost"), schema_version=0).problems(order)
    assert 3 == len(problems)
    assert [] == Emit("order.paid", on="paid").problems(order)


def test_an_event_body_round_trips_with_millisecond_times():
    """Published times carry milliseconds; parsing the body gives the same event."""
    event = Event(
        id="s:1:order.placed",
        type="order.placed",
        schema_version=1,
        saga_id="s",
        saga_kind="order",
        saga_version=1,
        occurred_at=datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC),
        data={"total": 5},
    )
    assert "2026-12-01T10:00:00.123Z" == event.to_json()["occurred_at"]
    assert event == Event.from_json(event.to_json())
