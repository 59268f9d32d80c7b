"""A metric's child taken while metrics were off keeps working once they are on."""

from __future__ import annotations

from saga.core import metrics


def test_a_child_taken_while_disabled_does_not_raise_after_enable():
    """labels() then enable() then inc(): nothing recorded, and no error in a worker's loop."""
    metric = metrics._counter("saga_test_switch", "A test's counter.", ("kind",))
    child = metric.labels("k")
    metric.create()
    child.inc()
    metric.labels("k").inc()
    assert 1 == metric.create().labels("k")._value.get()
