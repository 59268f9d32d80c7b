"""
The rules of the hypothesis state machine that drives a real engine beside the pure model.

:class:`SagaStateMachine`'s rules start sagas, fire declared and undeclared
events with drawn payloads, fire with a stale version, move the clock, run
the due work (timers and steps) inline, and make the next step crash.
After each rule it checks the engine against ``Machine.decide`` and every
saga's history against the definition (:mod:`saga.testing._checks`), then
the user's own invariants.  The example it runs in is
:mod:`saga.testing._example`'s; :func:`~saga.testing.saga_state_machine`
makes a subclass per application and kind.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, invariant, multiple, precondition, rule

from saga.exceptions import SagaError, TransitionNotAllowed, VersionConflict
from saga.testing._checks import history_problems
from saga.testing._example import _Example, _expect
from saga.testing._strategies import UNDECLARED, events, payloads

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hypothesis.strategies import SearchStrategy

    from saga.core.store.records import SagaRecord
    from saga.testing._coverage import Arrow

# Arrows one drive step may take with one saga.
_DRIVE_DEPTH = 3
# Rounds of "clock to the next due job, then the due work" one settle step takes.
_SETTLE_ROUNDS = 5


class SagaStateMachine(_Example):
    """The rules; :func:`~saga.testing.saga_state_machine` subclasses it for each kind tested."""

    sagas = Bundle("sagas")

    # -- rules --------------------------------------------------------------------

    @rule(target=sagas, data=st.data())
    def start(self, data: st.DataObject) -> Any:
        request = data.draw(self.requests, label="request")
        self.operations += 1
        operation = f"op-{self.operations}"
        self._say(
            f"saga instances start {self.kind} --operation-id {operation} "
            f"--request '{json.dumps(request, sort_keys=True)}'"
        )
        try:
            if self.starter:
                saga = self.engine.sagas.get(self.starter[0](self.engine, operation, request))
            else:
                saga = self.engine.sagas.start(
                    self.kind, operation_id=operation, request=request
                ).saga
        except SagaError:
            return multiple()
        _expect(
            (saga.state, saga.version) == (self.machine.initial.name, 1),
            f"a new saga is in {saga.state} v{saga.version}, not {self.machine.initial.name} v1",
        )
        self.started.append(saga.id)
        self._say(f"# -> saga {saga.id} in {saga.state}")
        return saga.id

    @rule(saga=sagas, data=st.data())
    def fire(self, saga: str, data: st.DataObject) -> None:
        before = self.engine.sagas.get(saga)
        event = data.draw(self._events_in(before.state), label="event")
        payload = data.draw(payloads(event, self.hints), label="payload")
        self._fire(saga, before, event, payload)

    def _events_in(self, state: str) -> SearchStrategy[str]:
        """
        Events to fire at a saga in ``state``.

        Unguided: any event of the machine, or an undeclared one.  Guided: half
        the time one that ``state`` declares (a uniform draw over every event
        rarely finds the one that leads on), and only the events this
        example's swarm enables.
        """
        ours = [e for e in self.machine.events if e not in self.decided_elsewhere]
        if not self.guided:
            return st.sampled_from([*ours, UNDECLARED])
        allowed = [e for e in ours if e not in self.swarm.quiet_events] or [UNDECLARED]
        here = [e for e in allowed if any(a[0] == state and a[1] == e for a in self.arrows)]
        anywhere = st.sampled_from([*allowed, *([UNDECLARED] if self.swarm.undeclared else [])])
        return st.one_of(st.sampled_from(here), anywhere) if here else anywhere

    def _fire(self, saga: str, before: SagaRecord, event: str, payload: Mapping[str, Any]) -> None:
        self._say(f"{self._replay(saga, event, payload)}   # in {before.state} v{before.version}")
        try:
            expected = self.machine.decide(before.state, event, before.data, payload)
        except TransitionNotAllowed:
            expected = None
            refused = True
        else:
            refused = False
        try:
            fired = self._fire_event(saga, event, payload)
        except TransitionNotAllowed:
            after = self.engine.sagas.get(saga)
            _expect(refused, f"the engine refused {event} in {before.state}; the model did not")
            _expect(before.version == after.version, "a refused event changed the saga")
            return
        _expect(not refused, f"the model refuses {event} in {before.state}; the engine took it")
        if expected is None:
            _expect(
                fired.absorbed and before.version == fired.saga.version,
                f"the model absorbs {event} in {before.state}; the engine moved the saga",
            )
        else:
            _expect(
                (fired.saga.state, fired.saga.version) == (expected.target, before.version + 1),
                f"the model goes to {expected.target}; the engine to {fired.saga.state}",
            )
        self._say(f"# -> {fired.saga.state} v{fired.saga.version}")

    @precondition(lambda self: self.swarm.stale)
    @rule(saga=sagas, data=st.data())
    def fire_stale(self, saga: str, data: st.DataObject) -> None:
        before = self.engine.sagas.get(saga)
        if before.version < 2:
            return
        event = data.draw(events(self.machine, undeclared=False), label="event")
        payload = data.draw(payloads(event, self.hints), label="payload")
        self._say(self._replay(saga, event, payload, expected_version=before.version - 1))
        try:
            self._fire_event(saga, event, payload, expected_version=before.version - 1)
        except VersionConflict:
            pass
        else:
            msg = "a decision made on a stale version was applied"
            raise AssertionError(msg)
        after = self.engine.sagas.get(saga)
        _expect(
            (after.state, after.version) == (before.state, before.version),
            "a refused stale decision changed the saga",
        )

    @precondition(lambda self: len(self.clock_steps) > 0)
    @rule(data=st.data())
    def advance_clock(self, data: st.DataObject) -> None:
        seconds = data.draw(st.sampled_from(self.clock_steps), label="seconds")
        self._advance(seconds)

    @precondition(lambda self: self.guided)
    @rule()
    def advance_clock_to_due_work(self) -> None:
        """The clock moves to the next job due (a retry's backoff, a check, a timer)."""
        self._to_due_work()

    @rule()
    def run_due_work(self) -> None:
        self._run_due()

    @precondition(lambda self: self.guided and bool(self.own_invariants))
    @rule()
    def settle(self) -> None:
        """
        The due work runs, the clock moving to each next due job, until the database is at rest.

        The application's invariants are checked at rest only: without this
        step an example full of retries may end before they are ever checked.
        """
        for _ in range(_SETTLE_ROUNDS):
            if self._at_rest():
                return
            self._to_due_work()
            self._run_due()

    @precondition(lambda self: self.guided and bool(self.states))
    @rule(data=st.data())
    def drive(self, data: st.DataObject) -> None:
        """
        Steer a saga toward an arrow out of its state that this example has not taken.

        The saga is one that can still move, one with such an arrow if any:
        a saga already ended, or whose arrows were all taken, teaches less.

        The kit fires the event itself when a payload drawn for it makes
        ``decide`` take that arrow; otherwise the arrow is someone else's (a
        timer's: the clock moves past the deadline; a step's or a check's: the
        clock moves to the next due job) and the due work runs.
        """
        live = [saga for saga, state in self.states.items() if self._out_of(state)]
        fresh = [saga for saga in live if self._out_of(self.states[saga], fresh=True)]
        # Sometimes any saga: one whose arrows were all taken by others may
        # carry other data (another payee) further, and an ended one must
        # absorb whatever comes.
        choices = [st.sampled_from(group) for group in (fresh, live) if group]
        choices.append(st.sampled_from(list(self.states)))  # in start order
        saga = data.draw(st.one_of(choices), label="saga")
        # A few arrows in a row: a path deep into the machine is rarely drawn
        # one random step at a time (the other rules end the saga meanwhile).
        for _ in range(_DRIVE_DEPTH):
            before = self.engine.sagas.get(saga)
            if not self._drive_once(saga, before, data):
                return
            after = self.engine.sagas.get(saga)
            if after.version == before.version:
                return
            self._reach(after, self.engine.sagas.history(saga))

    def _drive_once(self, saga: str, before: SagaRecord, data: st.DataObject) -> bool:
        """One arrow out of the saga's state, toward one not yet taken (False: none)."""
        out = self._out_of(before.state)
        if not out:
            ours = [e for e in self.machine.events if e not in self.decided_elsewhere]
            if ours:
                event = data.draw(st.sampled_from(ours), label="event")
                self._fire(saga, before, event, data.draw(payloads(event, self.hints)))
            return False
        # Arrows not yet taken; else those that lead on rather than end the saga.
        fresh_out = (
            self._out_of(before.state, fresh=True)
            or [a for a in out if not self.machine.state(a[2]).terminal]
            or out
        )
        _, event, goal = data.draw(st.sampled_from(fresh_out), label="toward")
        if event not in self.decided_elsewhere:  # the swarm quiets the random fires only
            for _ in range(3):
                payload = data.draw(payloads(event, self.hints), label="payload")
                if self._target_of(before, event, payload) == goal:
                    self._fire(saga, before, event, payload)
                    return True
        timeout = self.machine.state(before.state).timeout
        if timeout is not None and timeout.event == event:
            self._advance(math.ceil(timeout.duration(before.data)) + 1.0)
        else:
            self._to_due_work()
        self._run_due()
        return True

    def _out_of(self, state: str, *, fresh: bool = False) -> list[Arrow]:
        """The declared arrows out of ``state`` (``fresh``: not taken in this example)."""
        return [
            arrow
            for arrow in self.arrows
            if arrow[0] == state and not (fresh and arrow in self.reached)
        ]

    def _target_of(self, saga: SagaRecord, event: str, payload: Mapping[str, Any]) -> str | None:
        try:
            decided = self.machine.decide(saga.state, event, saga.data, payload)
        except TransitionNotAllowed:
            return None
        return None if decided is None else decided.target

    @precondition(lambda self: self.swarm.crashes)
    @rule()
    def crash_next_step(self) -> None:
        self._say("# the next step crashes (a transient error; it is retried)")
        self.faults.armed = True

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def histories_follow_the_definition(self) -> None:
        if not hasattr(self, "engine"):
            return
        problems = history_problems(self.engine, self.started, seen=self._reach)
        _expect(not problems, "\n".join(problems))

    @invariant()
    def users_invariants_hold(self) -> None:
        if not hasattr(self, "engine"):
            return
        checks = list(self.user_invariants)
        if self.own_invariants and self._at_rest():
            checks += self.own_invariants
        for check in checks:
            problems = list(check(self.engine) or ())
            _expect(not problems, "\n".join(problems))
