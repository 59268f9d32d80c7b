"""
Two versions of one saga kind, a leave request, and the migration between them.

Version 1: a request waits for its manager (an hour, then it expires); an
approved one is booked by a step.  Version 2: the wait is half an hour, then
the request is escalated to a director (a new state, with an action of its
own) before it expires; an approved one is booked and HR told.
"""

from __future__ import annotations

from typing import Any

from saga import (
    Application,
    Apply,
    Job,
    JobKind,
    Machine,
    Migration,
    Registry,
    State,
    Step,
    Timeout,
    Transition,
    fire_in,
)

DONE: list[str] = []  # the actions that ran, as "<action>:<saga id>:<definition version>"
HOOKED: list[tuple[str, str, int]] = []  # (saga id, old state, new version) per hook run


def _leave_v1() -> Machine:
    return Machine(
        "leave",
        version=1,
        states=[
            State(
                "requested",
                initial=True,
                actions=("notify_manager",),
                timeout=Timeout("expire", seconds=3600),
            ),
            State("approved", actions=("book",)),
            State("booked", terminal=True),
            State("rejected", terminal=True),
            State("expired", terminal=True),
        ],
        transitions=[
            Transition("approve", source="requested", target="approved"),
            Transition("reject", source="requested", target="rejected"),
            Transition("expire", source="requested", target="expired"),
            Transition("booked", source="approved", target="booked"),
        ],
    )


def _leave_v2() -> Machine:
    return Machine(
        "leave",
        version=2,
        states=[
            State(
                "requested",
                initial=True,
                actions=("notify_manager",),
                timeout=Timeout("escalate", seconds=1800),
            ),
            State(
                "escalated",
                actions=("notify_director",),
                timeout=Timeout("expire", seconds=1800),
            ),
            State("approved", actions=("book", "notify_hr")),
            State("booked", terminal=True),
            State("rejected", terminal=True),
            State("expired", terminal=True),
        ],
        transitions=[
            Transition("approve", source=("requested", "escalated"), target="approved"),
            Transition("reject", source=("requested", "escalated"), target="rejected"),
            Transition("escalate", source="requested", target="escalated"),
            Transition("expire", source="escalated", target="expired"),
            Transition("booked", source="approved", target="booked"),
        ],
    )


LEAVE_V1 = _leave_v1()
LEAVE_V2 = _leave_v2()


def _steps_for(actions: set[str]) -> Any:
    """The steps of ``actions``, one factory for every version registered (built once)."""

    def steps(ctx: Any) -> list[JobKind]:
        def noted(action: str) -> Step:
            def run(job: Job) -> dict[str, Any]:
                DONE.append(f"{action}:{job.payload['saga_id']}")
                return {"noted": action}

            return Step(run)

        def book(job: Job) -> Apply[dict[str, Any]]:
            saga_id = job.payload["saga_id"]

            def record(tx: Any) -> dict[str, Any]:
                fired = fire_in(
                    tx,
                    ctx.registry,
                    saga_id,
                    "booked",
                    payload={},
                    actor="worker",
                    cause="booked",
                    expected_version=job.payload["version"],
                )
                DONE.append(f"book:{saga_id}:v{fired.saga.definition_version}")
                return {"state": fired.saga.state}

            return Apply(record)

        made = {
            "notify_manager": noted("notify_manager"),
            "notify_director": noted("notify_director"),
            "notify_hr": noted("notify_hr"),
            "book": Step(book),
        }
        return [made[action].kind("leave", action) for action in sorted(actions)]

    return steps


def hook_approved(tx: Any, before: Any, after: Any) -> None:
    """HR hears of a request approved before v2 existed (kept in memory: a test's witness)."""
    del tx
    HOOKED.append((before.id, before.state, after.definition_version))


V1_TO_V2 = Migration(
    "leave",
    1,
    2,
    states={"requested": "requested", "approved": "approved"},
    hooks={"approved": hook_approved},
)


def app(
    versions: tuple[int, ...] = (1, 2), migrations: tuple[Migration, ...] = (V1_TO_V2,)
) -> Application:
    """The leave application registering ``versions``, with ``migrations``."""
    registry = Registry()
    machines = [{1: LEAVE_V1, 2: LEAVE_V2}[version] for version in versions]
    steps = _steps_for({a for m in machines for state in m.states for a in state.actions})
    for machine in machines:
        registry.register(machine, steps=steps)
    return Application(name="leave", registry=registry, migrations=migrations)


# For `--app tests.versions_app:NAME`.
leave_v1 = app(versions=(1,), migrations=())
leave = app()
leave_v2_only = app(versions=(2,), migrations=())
leave_unmapped = app(migrations=(Migration("leave", 1, 2, states={"requested": "requested"}),))
