"""Building a machine: every definition error is found, with a clear message."""

from __future__ import annotations

import pickle

import pytest

from state_machine import (
    DefinitionError,
    Machine,
    State,
    Timeout,
    Transition,
    TransitionNotAllowed,
    guard,
)


@guard
def always(data, payload):
    """Always holds."""
    return True


@guard
def big(data, payload):
    """The payload's n is large."""
    return payload.get("n", 0) > 10


def build(states, transitions):
    return Machine("demo", states=states, transitions=transitions)


def problems_of(states, transitions):
    with pytest.raises(DefinitionError) as info:
        build(states, transitions)
    return "\n".join(info.value.problems)


START = State("start", initial=True)
DONE = State("done", terminal=True)
GO = Transition("go", source="start", target="done")


class TestValidDefinitions:
    def test_minimal_machine_builds(self):
        """One initial state and one terminal state joined by a transition is valid."""
        machine = build([START, DONE], [GO])
        assert machine.initial == START
        assert machine.events == ("go",)
        assert machine.state_names == ("start", "done")

    def test_decide_returns_the_declared_transition(self):
        """An event with a declared transition from the state takes it."""
        machine = build([START, DONE], [GO])
        assert GO == machine.decide("start", "go")


class TestDefinitionErrors:
    def test_unknown_target(self):
        """A transition to a state that does not exist is an error naming it."""
        found = problems_of([START, DONE], [Transition("go", source="start", target="finished")])
        assert "unknown target state 'finished'" in found

    def test_unknown_source(self):
        """A transition from a state that does not exist is an error naming it."""
        found = problems_of([START, DONE], [GO, Transition("go", source="nowhere", target="done")])
        assert "unknown source state 'nowhere'" in found

    def test_unreachable_state(self):
        """A state no transition leads to is unreachable."""
        island = State("island", terminal=True)
        found = problems_of([START, DONE, island], [GO])
        assert "state 'island' is unreachable from 'start'" in found

    def test_non_terminal_state_without_way_out(self):
        """A non-terminal state with no transition out and no timeout is a trap."""
        stuck = State("stuck")
        found = problems_of(
            [START, stuck, DONE], [GO, Transition("wait", source="start", target="stuck")]
        )
        assert "non-terminal state 'stuck' has no way out" in found

    def test_cycle_without_terminal_exit(self):
        """States that loop among themselves and can never finish are refused."""
        a, b = State("a"), State("b")
        found = problems_of(
            [START, a, b, DONE],
            [
                GO,
                Transition("enter", source="start", target="a"),
                Transition("flip", source="a", target="b"),
                Transition("flop", source="b", target="a"),
            ],
        )
        assert "no terminal state can be reached from 'a'" in found
        assert "no terminal state can be reached from 'b'" in found

    def test_duplicate_state_names(self):
        """Two states with one name are a definition error."""
        found = problems_of([START, DONE, State("done", terminal=True)], [GO])
        assert "duplicate state name 'done'" in found

    def test_duplicate_transitions(self):
        """The same event, source and guard twice is a definition error."""
        found = problems_of([START, DONE], [GO, GO])
        assert "duplicate transition 'go' from 'start'" in found

    def test_shadowed_transition(self):
        """A transition after an unguarded one for the same event and source can never happen."""
        found = problems_of(
            [START, DONE], [GO, Transition("go", source="start", target="done", guard=big)]
        )
        assert "can never happen" in found

    def test_leaving_terminal_state_needs_compensation(self):
        """Terminal states absorb events: leaving one must be a declared compensation."""
        found = problems_of(
            [START, DONE, State("undone", terminal=True)],
            [GO, Transition("undo", source="done", target="undone")],
        )
        assert "leaves terminal state 'done'" in found

    def test_timeout_event_needs_a_transition(self):
        """A timeout must fire an event that some transition from its state accepts."""
        waiting = State("start", initial=True, timeout=Timeout("too_late", seconds=5))
        found = problems_of([waiting, DONE], [GO])
        assert "timeout event 'too_late' of state 'start' has no transition" in found

    def test_timeout_on_terminal_state(self):
        """A terminal state cannot time out."""
        done = State("done", terminal=True, timeout=Timeout("late", seconds=1))
        found = problems_of([START, done], [GO])
        assert "terminal state 'done' cannot have a timeout" in found

    def test_exactly_one_initial_state(self):
        """Zero or two initial states are refused."""
        found = problems_of([State("start"), DONE], [GO])
        assert "exactly one state must be initial, found 0" in found

    def test_invalid_names(self):
        """Names must be snake_case identifiers."""
        found = problems_of([START, DONE, State("Bad Name")], [GO])
        assert "state name 'Bad Name'" in found

    def test_two_guards_with_one_name(self):
        """Two different guard functions under one name would make diagrams lie."""

        @guard
        def big(data, payload):
            return False

        found = problems_of(
            [START, DONE, State("other", terminal=True)],
            [
                Transition("go", source="start", target="done", guard=globals()["big"]),
                Transition("go", source="start", target="other", guard=big),
            ],
        )
        assert "two different guards are both named 'big'" in found

    def test_every_problem_is_reported_at_once(self):
        """All findings come together, so one run fixes a definition."""
        with pytest.raises(DefinitionError) as info:
            build(
                [START, DONE, State("done", terminal=True), State("island", terminal=True)],
                [GO, Transition("go", source="start", target="nowhere", guard=always)],
            )
        assert len(info.value.problems) >= 2
        assert "invalid definition of saga 'demo'" in str(info.value)

    def test_definition_error_survives_pickling(self):
        """Errors raised in worker processes reach the parent intact."""
        with pytest.raises(DefinitionError) as info:
            build([START], [])
        copy = pickle.loads(pickle.dumps(info.value))
        assert info.value.problems == copy.problems


class TestTimeout:
    def test_needs_exactly_one_duration_source(self):
        """A timeout has a fixed duration or reads one from the data, not both or neither."""
        with pytest.raises(ValueError, match="exactly one"):
            Timeout("late")
        with pytest.raises(ValueError, match="exactly one"):
            Timeout("late", seconds=1, seconds_from="hold")

    def test_duration_from_data(self):
        """seconds_from reads the duration from the saga's data."""
        assert 90.0 == Timeout("late", seconds_from="hold").duration({"hold": 90})

    def test_duration_from_data_must_be_positive_number(self):
        """A missing, zero or non-numeric duration is refused with the key named."""
        with pytest.raises(ValueError, match="data\\['hold'\\]"):
            Timeout("late", seconds_from="hold").duration({"hold": 0})
        with pytest.raises(ValueError, match="positive number"):
            Timeout("late", seconds_from="hold").duration({"hold": True})


class TestDecide:
    machine = Machine(
        "demo",
        states=[
            State("start", initial=True),
            State("big_done", terminal=True),
            State("small_done", terminal=True),
            State("undone", terminal=True),
        ],
        transitions=[
            Transition("go", source="start", target="big_done", guard=big),
            Transition("go", source="start", target="small_done"),
            Transition("undo", source="big_done", target="undone", compensation=True, guard=big),
        ],
    )

    def test_first_holding_guard_wins(self):
        """Transitions sharing an event are tried in order; the first whose guard holds wins."""
        assert "big_done" == self.machine.decide("start", "go", {}, {"n": 11}).target
        assert "small_done" == self.machine.decide("start", "go", {}, {"n": 1}).target

    def test_terminal_state_absorbs_undeclared_events(self):
        """A terminal state returns None for an event it has no compensation for."""
        assert self.machine.decide("small_done", "go") is None

    def test_terminal_state_absorbs_compensation_whose_guard_fails(self):
        """A compensation only applies when its guard holds; otherwise it is absorbed."""
        assert self.machine.decide("big_done", "undo", {}, {"n": 1}) is None
        assert "undone" == self.machine.decide("big_done", "undo", {}, {"n": 20}).target

    def test_non_terminal_state_refuses_undeclared_event(self):
        """A non-terminal state with no transition for the event raises, naming both."""
        with pytest.raises(TransitionNotAllowed) as info:
            self.machine.decide("start", "undo")
        assert ("start", "undo") == (info.value.state, info.value.event)

    def test_unknown_event_is_refused_everywhere(self):
        """An event no transition declares is refused, even in a terminal state."""
        with pytest.raises(TransitionNotAllowed, match="unknown event"):
            self.machine.decide("big_done", "explode")

    def test_unknown_state_is_refused(self):
        """A state the machine does not have is refused."""
        with pytest.raises(TransitionNotAllowed, match="unknown state"):
            self.machine.decide("limbo", "go")

    def test_transition_not_allowed_survives_pickling(self):
        """The error keeps its typed attributes across processes."""
        error = TransitionNotAllowed(state="a", event="b", reason="c")
        copy = pickle.loads(pickle.dumps(error))
        assert (error.state, error.event, error.reason, str(error)) == (
            copy.state,
            copy.event,
            copy.reason,
            str(copy),
        )
