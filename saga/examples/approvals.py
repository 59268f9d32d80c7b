"""A user's application, as the README writes it: `saga ... --app saga.examples.approvals:app`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga import (
    Application,
    Job,
    Machine,
    Registry,
    Route,
    State,
    Step,
    Timeout,
    Transition,
    by_saga_id,
    guard,
)

if TYPE_CHECKING:
    from collections.abc import Mapping


@guard
def signed(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The reviewer signed the approval."""
    return bool(payload.get("signature"))


approval = Machine(
    "approval",
    states=[
        State(
            "submitted",
            initial=True,
            timeout=Timeout("review_overdue", seconds=3600),
            actions=("notify_reviewer",),
        ),
        State("escalated", timeout=Timeout("review_overdue", seconds=86400)),
        State("approved", terminal=True),
        State("rejected", terminal=True),
    ],
    transitions=[
        Transition("approve", source=("submitted", "escalated"), target="approved", guard=signed),
        Transition("reject", source=("submitted", "escalated"), target="rejected"),
        Transition("review_overdue", source="submitted", target="escalated"),
        Transition("review_overdue", source="escalated", target="rejected"),
    ],
)


def notify_reviewer(job: Job) -> dict[str, str]:
    """Tell the reviewer; the result is kept with the job."""
    return {"notified": "reviewer of " + job.payload["saga_id"]}


registry = Registry()
registry.register(approval, steps={"notify_reviewer": Step(notify_reviewer, max_attempts=5)})
# The e-signature service tells us when a document was signed (or refused).
ROUTES = (
    Route(
        source="esign", type="document.signed", correlate=by_saga_id("reference"), event="approve"
    ),
    Route(
        source="esign", type="document.refused", correlate=by_saga_id("reference"), event="reject"
    ),
)
app = Application(name="approvals", registry=registry, routes=ROUTES)
