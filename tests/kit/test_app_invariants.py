"""run_saga_test checks the application's own invariants (those of `saga verify`) by default."""

from __future__ import annotations

import dataclasses

import pytest

from saga.examples.approvals import app
from saga.ops import Invariant
from saga.testing import run_saga_test
from tests.conftest import POSTGRES_URL, require_postgres


def never_escalated(engine):
    """A rule the approval breaks as soon as a review is overdue (planted for this test)."""
    rule = Invariant("never_escalated", "no approval waits for a second reviewer")
    for saga in engine.instances.list(kind="approval", limit=1000):
        rule.check(saga.state != "escalated", f"approval {saga.id} is escalated")
    return [rule]


STRICT = dataclasses.replace(app, invariants=never_escalated)


def url_of(backend):
    if backend == "postgres":
        require_postgres()
        return POSTGRES_URL
    return None


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.soak)])
def test_the_applications_own_invariant_is_checked_without_being_passed(backend):
    """run_saga_test(app) alone finds the broken rule, named as `saga verify` names it."""
    with pytest.raises(AssertionError, match=r"never_escalated: approval \S+ is escalated"):
        run_saga_test(STRICT, url=url_of(backend), max_examples=100)


def test_the_applications_invariants_can_be_left_out():
    """app_invariants=False: the same run passes (the rule is the application's, not the kit's)."""
    run_saga_test(STRICT, app_invariants=False, max_examples=10)


@pytest.mark.slow
def test_the_tests_own_invariants_are_checked_beside_the_applications():
    """invariants= adds to the application's rules, it does not replace them."""
    asked = []

    def counted(engine):
        asked.append(engine)
        return []

    with pytest.raises(AssertionError, match="never_escalated"):
        run_saga_test(STRICT, invariants=[counted], max_examples=100)
    assert asked
