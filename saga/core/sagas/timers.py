"""Durable timeouts: a saga's deadline is a job due at that database time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga.core.faults import crash_point
from saga.core.queue.jobs import TIMER_KIND, TIMER_QUEUE
from saga.core.queue.kinds import Apply, JobKind
from saga.core.sagas.transitions import fire_in, lock_in
from saga.exceptions import NotFound
from state_machine import TIMER

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga.core.engine import Engine
    from saga.core.queue.values import Job
    from saga.core.sagas.registry import Registry
    from saga.core.store.db import Tx


def timer_kind(engine: Engine) -> JobKind:
    """
    The job kind that fires sagas' deadlines.

    The timer job names the saga version it was set for: if the saga moved
    on since (the timer was replaced, or another worker fired it), firing is
    a no-op.  Many workers may hold timers; each deadline fires once, because
    it is one job row claimed under a lease and completed in the same
    transaction as the transition.
    """
    registry = engine.registry

    def handle(job: Job) -> Apply[dict[str, Any]]:
        saga_id = str(job.payload["saga_id"])
        version = int(job.payload["version"])
        event = str(job.payload["event"])
        saga = engine.sagas.get(saga_id)
        payload: Mapping[str, Any] = {}
        if saga.version == version:
            # Outside any transaction: the saga kind may ask the outside
            # world first (an application asks its provider).
            saga_type = registry.get(saga.kind, saga.definition_version)
            payload = saga_type.timeout_payload(engine, saga, event)
        # Mid-batch: the timer is claimed, nothing fired yet.
        crash_point("timer.before_fire")
        return Apply(
            lambda tx: fire_timeout_in(
                tx, registry, saga_id, version=version, event=event, payload=payload
            )
        )

    return JobKind(name=TIMER_KIND, handler=handle, queue=TIMER_QUEUE, max_attempts=10)


def fire_timeout_in(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    *,
    version: int,
    event: str,
    payload: Mapping[str, Any],
) -> dict[str, Any]:
    """Fire ``event`` if the saga is still at ``version`` with that deadline; else nothing."""
    try:
        saga = lock_in(tx, saga_id)
    except NotFound:
        return {"skipped": "no such saga"}
    if saga.version != version or saga.deadline_event != event:
        return {"skipped": f"saga moved on to version {saga.version} ({saga.state})"}
    fired = fire_in(
        tx,
        registry,
        saga_id,
        event,
        payload=payload,
        actor="timer",
        cause=f"deadline {event} of version {version}",
        expected_version=version,
        origin=TIMER,
    )
    return {"fired": event, "state": fired.saga.state, "version": fired.saga.version}
