"""
The outbox relay: publish committed events, mark them only once confirmed.

A relay claims a batch of unpublished events under a lease from the database
clock and a fresh token (the queue's rules: ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so relays in many workers share the work), hands them to its
publishers, and marks as published only the events every publisher
confirmed, and only while it still holds their lease (a relay whose lease
expired changes nothing; another relay publishes those events again).

What is promised:

* an event is published at least once after its transition commits, and
  never for a transition that rolled back;
* a saga's events are claimed in order: only a saga's oldest unpublished
  event is eligible, so event *n+1* is not published before event *n* was
  confirmed;
* a relay that dies after the broker confirmed and before it marked the
  row publishes that event again: consumers deduplicate by event id (the
  consumer inbox does) and may order by ``saga_version``.

What is not: order across sagas, and exactly-once delivery.  A relay whose
lease expired mid-publish can deliver a duplicate of an earlier event after
a later one of the same saga; its ``saga_version`` tells.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from saga.core.faults import crash_point
from saga.core.logs import get_logger
from saga.core.messages.outbox import Event
from saga.core.queue.backoff import Backoff
from saga.core.queue.kinds import error_text
from saga.exceptions import PublishFailed

if TYPE_CHECKING:
    from saga.core.store.db import Database, Tx

log = get_logger(__name__)

DEFAULT_LEASE_SECONDS: Final = 30.0
# Broker outages are retried for as long as they last: an event is never
# dropped, only delayed, so the backoff is capped low enough to catch up soon.
DEFAULT_BACKOFF: Final = Backoff(base=0.5, cap=30.0)
# An event the broker refuses (nack, too large) this many times is dead-lettered.
DEFAULT_MAX_REFUSALS: Final = 10


class Publisher(Protocol):
    """Where a relay publishes: a broker, or subscribers in this process."""

    def publish(self, events: Sequence[Event]) -> Sequence[str]:
        """
        Publish ``events`` in order; the ids confirmed, in order.

        Stop at the first event that cannot be published and raise
        :class:`~saga.exceptions.PublishFailed` with the ids confirmed
        before it (any other exception: none confirmed).  The rest are
        retried later.
        """

    def close(self) -> None:
        """Release connections."""


Subscriber = Callable[[Event], object]


class Subscribers:
    """
    In-process subscribers, by event type pattern (``*`` one word, ``#`` any).

    A subscriber runs in the relay's process before the event is marked
    published; if it raises, the event is retried (so it must be idempotent,
    like any consumer of at-least-once delivery).
    """

    def __init__(self, subscriptions: Mapping[str, Sequence[Subscriber]] | None = None) -> None:
        self._subscriptions: list[tuple[str, Subscriber]] = []
        for pattern, subscribers in (subscriptions or {}).items():
            for subscriber in subscribers:
                self.subscribe(pattern, subscriber)

    def subscribe(self, pattern: str, subscriber: Subscriber) -> None:
        """Call ``subscriber`` with every event whose type matches ``pattern``."""
        self._subscriptions.append((pattern, subscriber))

    def publish(self, events: Sequence[Event]) -> Sequence[str]:
        """Deliver each event to its subscribers; a failing one refuses its event."""
        done: list[str] = []
        for event in events:
            for pattern, subscriber in self._subscriptions:
                if topic_matches(pattern, event.type):
                    try:
                        subscriber(event)
                    except Exception as exc:
                        raise PublishFailed(
                            confirmed=done, reason=error_text(exc), rejected=event.id
                        ) from exc
            done.append(event.id)
        return done

    def close(self) -> None:
        """Nothing to release."""


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether ``routing_key`` matches an AMQP topic ``pattern`` (``*`` a word, ``#`` any)."""

    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        return bool(k) and p[0] in ("*", k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), routing_key.split("."))


@dataclass(frozen=True, slots=True)
class _Claimed:
    """A claimed outbox row: its id, its failures and refusals so far, its event."""

    row: int
    errors: int
    refusals: int
    event: Event


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What publishing a batch did: the ids confirmed, the error, the event refused."""

    confirmed: set[str]
    error: str | None
    refused: str | None


@dataclass(slots=True)
class RelayReport:
    """What a relay did: events claimed, published, failed, and batches run."""

    claimed: int = 0
    published: int = 0
    failed: int = 0
    dead: int = 0
    lost_leases: int = 0
    batches: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON fields."""
        return {
            "claimed": self.claimed,
            "published": self.published,
            "failed": self.failed,
            "dead": self.dead,
            "lost_leases": self.lost_leases,
            "batches": self.batches,
            "last_error": self.errors[-1] if self.errors else None,
        }


class Relay:
    """
    Publish the outbox of ``db`` to ``publishers``.

    It is a poller: ``saga worker`` runs one in each worker process between
    claims, ``saga relay`` runs one alone.  Every publisher must confirm an
    event before it is marked published.

    Args:
        batch: events claimed per transaction.
        lease_seconds: how long a claimed event is this relay's; publishing
            a batch must take less.
        backoff: delay before an event that failed is due again (per event,
            by its number of failures).
        max_refusals: an event the broker (or a subscriber) refused this many
            times is dead-lettered, with the last error as its reason, and no
            longer holds back its saga's later events.  A connection failure
            is never the event's fault: it is retried for as long as it lasts.

    """

    def __init__(
        self,
        db: Database,
        publishers: Sequence[Publisher],
        *,
        batch: int = 100,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        backoff: Backoff = DEFAULT_BACKOFF,
        max_refusals: int = DEFAULT_MAX_REFUSALS,
        name: str | None = None,
    ) -> None:
        if batch < 1 or lease_seconds <= 0:
            msg = "batch and lease_seconds must be positive"
            raise ValueError(msg)
        if not publishers:
            msg = "a relay needs at least one publisher"
            raise ValueError(msg)
        self.db = db
        self.publishers = tuple(publishers)
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.backoff = backoff
        self.max_refusals = max_refusals
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.report = RelayReport()
        self._log = log.bind(relay=self.name)

    def poll(self) -> int:
        """Claim one batch and publish it; how many events were claimed."""
        token = uuid.uuid4().hex
        rows = self.db.transaction(
            lambda tx: tx.all(
                "claim_outbox", token=token, batch=self.batch, lease_seconds=self.lease_seconds
            )
        )
        if not rows:
            return 0
        self.report.batches += 1
        self.report.claimed += len(rows)
        claimed = [
            _Claimed(
                row=int(row["id"]),
                errors=int(row["errors"]),
                refusals=int(row["refusals"]),
                event=Event.from_row(row),
            )
            for row in sorted(rows, key=lambda row: int(row["id"]))
        ]
        crash_point("relay.before_publish")
        outcome = self._publish([c.event for c in claimed])
        crash_point("relay.after_publish")
        self._settle(token, claimed, outcome)
        return len(rows)

    def _publish(self, events: Sequence[Event]) -> _Outcome:
        """
        The events every publisher confirmed, the first error, the event refused.

        Each publisher gets the events all publishers before it confirmed
        (a prefix of the batch), so an event is marked only when every one
        of them took it; a publisher's failure never keeps the later
        publishers from the events already confirmed.
        """
        pending = list(events)
        first_error: str | None = None
        refused: str | None = None
        for publisher in self.publishers:
            if not pending:
                break
            error: str | None = None
            rejected: str | None = None
            try:
                done = set(publisher.publish(pending))
            except PublishFailed as exc:
                done, error, rejected = set(exc.confirmed), exc.reason, exc.rejected
            except Exception as exc:  # noqa: BLE001 - any failure is retried later
                done, error = set(), error_text(exc)
            kept = []
            for event in pending:
                if event.id not in done:
                    error = error or f"{type(publisher).__name__} did not confirm {event.id}"
                    break
                kept.append(event)
            pending = kept
            if error is not None and first_error is None:
                first_error, refused = error, rejected
        return _Outcome({e.id for e in pending}, first_error, refused)

    def _settle(self, token: str, claimed: Sequence[_Claimed], outcome: _Outcome) -> None:
        published = [c for c in claimed if c.event.id in outcome.confirmed]
        unconfirmed = [c for c in claimed if c.event.id not in outcome.confirmed]
        error = outcome.error
        # A refusal is the refused event's fault alone: the others of the batch
        # (other sagas') go back at once, untouched.  A connection failure is
        # nobody's fault: every unconfirmed event waits, counted but never
        # dead-lettered for it.
        if outcome.refused is not None:
            failed = [c for c in unconfirmed if c.event.id == outcome.refused]
            released = [c for c in unconfirmed if c.event.id != outcome.refused]
        else:
            failed, released = unconfirmed, []
        dead = [
            c.event.id
            for c in failed
            if c.event.id == outcome.refused and c.refusals + 1 >= self.max_refusals
        ]

        def settle(tx: Tx) -> int:
            marked = tx.all(
                "mark_outbox_published", ids=json.dumps([c.row for c in published]), token=token
            )
            for c in failed:
                tx.run(
                    "fail_outbox",
                    ids=json.dumps([c.row]),
                    token=token,
                    error=(error or "not published")[:2000],
                    delay_seconds=self.backoff.delay(c.errors + 1),
                    refused=c.event.id == outcome.refused,
                    dead=c.event.id in dead,
                )
            if released:
                tx.run("release_outbox", ids=json.dumps([c.row for c in released]), token=token)
            return len(marked)

        marked = self.db.transaction(settle)
        self.report.published += marked
        self.report.lost_leases += len(published) - marked
        self.report.failed += len(failed)
        self.report.dead += len(dead)
        if dead:
            self._log.error("outbox_event_dead", events=dead, error=error)
        if marked < len(published):
            self._log.warning(
                "outbox_lease_lost", published=len(published), marked=marked, token=token
            )
        if error is not None:
            self.report.errors.append(error)
            self._log.warning("outbox_publish_failed", failed=len(failed), error=error)

    def next_due_in(self) -> float | None:
        """Seconds until an event can be claimed; ``None`` if none waits."""
        seconds = self.db.transaction(lambda tx: tx.scalar("outbox_next_due_in"), write=False)
        return None if seconds is None else max(0.0, float(seconds))

    def run(
        self,
        *,
        burst: bool = False,
        stopping: Callable[[], bool] = lambda: False,
        wait: Callable[[float], object] = time.sleep,
        poll_interval: float = 1.0,
    ) -> RelayReport:
        """
        Publish until ``stopping()``; with ``burst``, until a poll finds nothing to claim.

        Events backing off after a failure are not waited for in burst mode.
        ``wait(seconds)`` sleeps between idle polls (an ``Event.wait`` wakes on a stop).
        """
        self._log.info("relay_started", batch=self.batch, burst=burst)
        while not stopping():
            if self.poll():
                continue
            if burst:
                break
            due = self.next_due_in()
            wait(poll_interval if due is None else min(poll_interval, due))
        self._log.info("relay_stopped", **self.report.as_dict())
        return self.report

    def close(self) -> None:
        """Close the publishers."""
        for publisher in self.publishers:
            publisher.close()
