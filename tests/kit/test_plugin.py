"""The pytest fixtures of saga.testing.plugin, as docs/testing.md uses them."""

from __future__ import annotations

import pytest

from saga.examples.approvals import app


@pytest.fixture
def saga_app():
    return app


def test_an_unreviewed_approval_escalates(saga_engine, saga_clock, saga_worker):
    """An hour passes by the clock, the worker runs the due timer: escalated."""
    saga = saga_engine.sagas.start("approval", operation_id="doc-1", request={}).saga
    saga_clock.advance(3601)
    saga_worker()
    assert "escalated" == saga_engine.sagas.get(saga.id).state


def test_before_its_deadline_nothing_fires(saga_engine, saga_clock, saga_worker):
    """The clock moved less than the timeout: the timer waits."""
    saga = saga_engine.sagas.start("approval", operation_id="doc-1", request={}).saga
    saga_clock.advance(3599)
    saga_worker()
    assert "submitted" == saga_engine.sagas.get(saga.id).state
