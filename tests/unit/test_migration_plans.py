"""The check of a migration plan, against the machines alone: each problem named."""

from __future__ import annotations

import pytest

from saga import Migration
from saga.core.sagas.plans import declared_problems, hook_reason
from saga.exceptions import ApplicationError
from tests.versions_app import LEAVE_V1, LEAVE_V2, app, hook_approved

FULL = {"requested": "requested", "approved": "approved"}


def problems(migration, versions=(1, 2)):
    return migration.problems(app(versions=versions, migrations=()).registry)


def test_the_declared_plan_passes():
    assert [] == problems(Migration("leave", 1, 2, states=FULL, hooks={"approved": hook_approved}))


def test_an_unmapped_live_state_is_named():
    found = problems(Migration("leave", 1, 2, states={"requested": "requested"}, hooks={}))
    assert [
        "migration of 'leave' v1 -> v2: live state 'approved' of v1 is mapped nowhere: "
        "map it to a state of v2"
    ] == found


def test_a_target_the_new_version_lacks_is_named_with_its_states():
    found = problems(
        Migration(
            "leave",
            1,
            2,
            states={"requested": "waiting", "approved": "approved"},
            hooks={"approved": hook_approved},
        )
    )
    assert [
        "migration of 'leave' v1 -> v2: maps 'requested' to 'waiting', which v2 does not have "
        "(its states: requested, escalated, approved, booked, rejected, expired)"
    ] == found


def test_a_state_the_old_version_lacks_is_named():
    found = problems(
        Migration(
            "leave",
            1,
            2,
            states={**FULL, "escalated": "escalated"},
            hooks={"approved": hook_approved},
        )
    )
    assert ["migration of 'leave' v1 -> v2: v1 has no state 'escalated'"] == found


def test_changed_entry_actions_without_a_hook_are_named():
    (found,) = problems(Migration("leave", 1, 2, states=FULL))
    assert found.startswith(
        "migration of 'leave' v1 -> v2: 'approved' -> 'approved' enters with actions "
        "['book', 'notify_hr'] where the old state had ['book']"
    )
    assert "declare hooks={'approved': …}" in found


def test_a_change_of_meta_needs_a_hook_too():
    from state_machine import State

    assert hook_reason(State("a", meta={"seat": "held"}), State("a", meta={"seat": "held"})) is None
    why = hook_reason(State("a", meta={"seat": "held"}), State("b", meta={"seat": "taken"}))
    assert why is not None
    assert "changes what the state holds (meta {'seat': 'held'} -> {'seat': 'taken'})" in why


def test_a_final_state_is_not_migrated():
    found = problems(
        Migration(
            "leave",
            1,
            2,
            states={**FULL, "booked": "booked"},
            hooks={"approved": hook_approved},
        )
    )
    assert [
        "migration of 'leave' v1 -> v2: 'booked' is final in v1; finished sagas stay on the "
        "version they finished on: leave it out"
    ] == found


def test_versions_the_application_lacks_are_named():
    found = problems(Migration("leave", 1, 3, states=FULL))
    assert ["migration of 'leave' v1 -> v3: the application registers no 'leave' v3"] == found
    assert ["migration of 'leave' v2 -> v1: a migration goes to a newer version"] == problems(
        Migration("leave", 2, 1, states=FULL)
    )


def test_a_hook_for_a_state_it_does_not_map_is_named():
    found = problems(
        Migration(
            "leave",
            1,
            2,
            states=FULL,
            hooks={"approved": hook_approved, "booked": hook_approved},
        )
    )
    assert ["migration of 'leave' v1 -> v2: a hook for 'booked', which it does not map"] == found


def test_a_migration_declared_twice_is_named():
    twice = Migration("leave", 1, 2, states=FULL, hooks={"approved": hook_approved})
    registry = app(migrations=()).registry
    assert ["migration of 'leave' v1 -> v2 is declared 2 times"] == declared_problems(
        (twice, twice), registry
    )


def test_the_engine_refuses_an_application_with_a_wrong_plan(tmp_path):
    """Checked when an engine opens the application, with the rest of its problems."""
    from saga import Engine

    wrong = app(migrations=(Migration("leave", 1, 2, states={"requested": "requested"}),))
    with pytest.raises(ApplicationError, match="live state 'approved' of v1 is mapped nowhere"):
        Engine(f"sqlite:///{tmp_path}/x.db", app=wrong)


def test_the_plans_values_are_frozen():
    migration = Migration("leave", 1, 2, states=FULL)
    with pytest.raises(TypeError):
        migration.states["approved"] = "booked"  # type: ignore[index]
    assert LEAVE_V1.version < LEAVE_V2.version
