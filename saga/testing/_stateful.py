"""
A hypothesis state machine that drives a real engine beside the pure model.

:func:`saga_state_machine` builds, for one saga kind of an application, a
``RuleBasedStateMachine`` whose rules start sagas, fire declared and
undeclared events with drawn payloads, fire with a stale version, move the
clock, run the due work (timers and steps) inline, and make the next step
crash.  After each rule it checks the engine against ``Machine.decide`` and
every saga's history against the definition (:mod:`saga.testing._checks`),
then the user's own invariants.  A failure is shrunk by hypothesis to the
shortest sequence and printed as lines a person can replay with the CLI.
"""

from __future__ import annotations

import atexit
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from hypothesis import HealthCheck, Phase, note, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from saga.core.app import Application
from saga.core.engine import Engine
from saga.core.queue.kinds import Handlers, Step
from saga.core.queue.leases import Queue
from saga.core.sagas.refusals import allowed_origins
from saga.core.sagas.transitions import fire_in
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.exceptions import SagaError, TransitionNotAllowed, VersionConflict
from saga.testing._checks import history_problems
from saga.testing._clock import SagaClock
from saga.testing._coverage import REPORTS, Arrow, Coverage, arrows_of, declared_arrows
from saga.testing._strategies import UNDECLARED, Payloads, events, payloads
from saga.testing._support import _Database, _Faults, application_of
from state_machine import OPERATOR, ORIGINS

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from saga.core.sagas.changes import Fired
    from saga.core.store.records import SagaRecord, TransitionRecord
    from state_machine import Machine

Invariant = Callable[[Engine], "Iterable[str] | None"]
Starter = Callable[[Engine, str, Mapping[str, Any]], str]
Setup = Callable[[Engine], object]
# Rounds of due work one `saga worker --burst` step may take before the kit
# calls it a loop.
_MAX_ROUNDS = 20
# Arrows one drive step may take with one saga.
_DRIVE_DEPTH = 3
# Rounds of "clock to the next due job, then the due work" one settle step takes.
_SETTLE_ROUNDS = 5


def _expect(ok: bool, message: str) -> None:
    """Fail the example with ``message`` (hypothesis shrinks and prints the steps)."""
    if not ok:
        raise AssertionError(message)


@dataclass(frozen=True, slots=True)
class _Swarm:
    """
    Which of the kit's own moves one example makes (swarm testing).

    Every move enabled in every example spreads each example thin: an
    example that never cancels goes deeper into the paths cancelling cuts
    short, one without crashes reaches what a crash would retry.  Shrinking
    goes toward everything enabled, the kit's plain rules.
    """

    quiet_events: frozenset[str] = frozenset()
    crashes: bool = True
    stale: bool = True
    undeclared: bool = True

    def describe(self) -> str:
        off = [f"never fires {e}" for e in sorted(self.quiet_events)]
        off += [what for what, on in self._moves() if not on]
        return ", ".join(off)

    def _moves(self) -> list[tuple[str, bool]]:
        return [
            ("crashes no step", self.crashes),
            ("decides on no stale version", self.stale),
            ("fires no undeclared event", self.undeclared),
        ]


_ALL_ON: Final = _Swarm()


def _swarms(machine: Machine) -> SearchStrategy[_Swarm]:
    """
    Swarms of one machine: each ending may be left out, and each fault.

    An ending is an event whose every arrow ends the saga (a cancel, a reject).

    Events that lead on are never left out: without them nothing goes deeper.
    """
    endings = sorted(
        {t.event for t in machine.transitions}
        - {t.event for t in machine.transitions if not machine.state(t.target).terminal}
    )
    on = st.booleans().map(lambda off: not off)
    return st.builds(
        _Swarm,
        quiet_events=st.frozensets(st.sampled_from(endings)) if endings else st.just(frozenset()),
        crashes=on,
        stale=on,
        undeclared=on,
    )


class SagaStateMachine(RuleBasedStateMachine):
    """The rules; :func:`saga_state_machine` makes a subclass per application and kind."""

    app: ClassVar[Application]
    kind: ClassVar[str]
    base_url: ClassVar[str | None] = None
    hints: ClassVar[Payloads | None] = None
    requests: ClassVar[SearchStrategy[Mapping[str, Any]]] = st.just({})
    user_invariants: ClassVar[tuple[Invariant, ...]] = ()
    # The application's own (saga verify's): checked at rest, as verify is run.
    own_invariants: ClassVar[tuple[Invariant, ...]] = ()
    # Tuples, so that the functions are not bound as methods.
    starter: ClassVar[tuple[Starter, ...]] = ()
    setup: ClassVar[tuple[Setup, ...]] = ()
    clock_steps: ClassVar[tuple[float, ...]] = (1.0,)
    # Coverage-guided generation (swarm, steering, target()); False: plain random rules.
    guided: ClassVar[bool] = True
    # The reconciliation's outcomes: decided by its checker or through `recon
    # resolve` and its judge, never fired as a plain event (the kit would be
    # the operator confirming money nobody checked); and the events the test
    # says are not the kit's to fire (a step's, a provider's).
    decided_elsewhere: ClassVar[frozenset[str]] = frozenset()
    coverage: ClassVar[Coverage]
    _template_file: ClassVar[Path | None] = None

    sagas = Bundle("sagas")

    @property
    def machine(self) -> Machine:
        return self.app.registry.get(self.kind).machine

    @initialize(data=st.data())
    def open(self, data: st.DataObject) -> None:
        self.swarm = data.draw(_swarms(self.machine), label="swarm") if self.guided else _ALL_ON
        if self.swarm != _ALL_ON:
            self._say(f"# this example {self.swarm.describe()}")
        self.coverage.examples += 1
        self.reached: set[Arrow] = set()
        self.entered: set[str] = set()
        # Each saga's state after the last step, as the checks read it.
        self.states: dict[str, str] = {}
        self.database = _Database.fresh(self.base_url, template=self._template())
        with Engine(self.database.url, app=self.app, check_schema=False) as setup:
            setup.upgrade()  # a no-op on a copy of the template
        self.engine = Engine(self.database.url, app=self.app)
        for prepare in self.setup:
            prepare(self.engine)
        self.clock = SagaClock(self.engine.db)
        self.faults = _Faults()
        self.handlers = Handlers([self.faults.wrap(k) for k in builtin_handlers(self.engine)])
        self.started: list[str] = []
        self.operations = 0
        self.queue = Queue(self.engine.db)
        self.step_kinds = [kind.name for kind in self.app.step_kinds(self.engine)]
        self.job_kinds = [kind.name for kind in builtin_handlers(self.engine)]
        self.pollers = self.engine.pollers()
        self.app_pollers = list(self.app.pollers(self.engine))
        self.arrows = declared_arrows(self.machine)

    @classmethod
    def _template(cls) -> Path | None:
        """A migrated SQLite file to copy for each example (migrating costs more than a copy)."""
        if cls.base_url is not None and not cls.base_url.startswith("sqlite"):
            return None
        template = cls.__dict__.get("_template_file")
        if template is None:
            folder = Path(tempfile.mkdtemp(prefix="saga-template-"))
            atexit.register(shutil.rmtree, folder, True)
            template = folder / "saga.db"
            with Engine(f"sqlite:///{template}", app=cls.app, check_schema=False) as setup:
                setup.upgrade()
            cls._template_file = template
        return template

    def teardown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is None:
            return
        try:
            self.coverage.add(self.entered, self.reached)
            if self.guided and currently_in_test_context():
                # Hill-climb toward examples that take more of the machine's arrows.
                target(float(len(self.reached)), label="declared transitions reached")
        finally:
            # Whatever happened, the example's database (a PostgreSQL schema) goes.
            engine.close()
            self.database.cleanup()

    def _fire_event(
        self, saga: str, event: str, payload: Mapping[str, Any], **options: Any
    ) -> Fired:
        # The kit plays every door: it fires an event as one its machine lets fire it.
        origin = self._origin(event)
        return self.engine.db.transaction(
            lambda tx: fire_in(
                tx,
                self.engine.registry,
                saga,
                event,
                payload=payload,
                actor="kit",
                cause=None,
                origin=origin,
                **options,
            )
        )

    def _allowed(self, event: str) -> frozenset[str]:
        saga_type = self.engine.registry.get(self.kind)
        return frozenset(allowed_origins(saga_type.machine, saga_type.recon_outcomes, event))

    def _origin(self, event: str) -> str:
        # Operators first: what an operator may fire replays from the command line.
        allowed = self._allowed(event)
        return OPERATOR if OPERATOR in allowed else next(o for o in ORIGINS if o in allowed)

    def _replay(
        self,
        saga: str,
        event: str,
        payload: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> str:
        """The command that replays a fire, or a comment where no command may fire it."""
        body = json.dumps(dict(payload), sort_keys=True)
        if OPERATOR not in self._allowed(event):
            # The machine keeps it from operators: a step, timer or route fires it.
            return f"# {event} fired as a {self._origin(event)} would, payload {body}"
        stale = "" if expected_version is None else f" --expected-version {expected_version}"
        return (
            f"saga instances fire {saga} {event} --payload '{body}'{stale} "
            "--actor kit --reason 'replayed from a saga test'"
        )

    def _say(self, line: str) -> None:
        note(line)

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

    def _advance(self, seconds: float) -> None:
        self._say(f"# the clock moves {seconds:g} s")
        self.clock.advance(seconds)

    @precondition(lambda self: self.guided)
    @rule()
    def advance_clock_to_due_work(self) -> None:
        """The clock moves to the next job due (a retry's backoff, a check, a timer)."""
        self._to_due_work()

    def _to_due_work(self) -> None:
        waits = [self.queue.next_due_in(self.job_kinds)]
        waits += [poller.next_due_in() for poller in self.app_pollers]
        wait = min((w for w in waits if w is not None), default=None)
        if wait is not None and wait > 0:
            self._advance(math.ceil(wait) + 1.0)

    @rule()
    def run_due_work(self) -> None:
        self._run_due()

    def _run_due(self) -> None:
        self._say("saga worker --burst")
        worker = Worker(self.engine.db, self.handlers, listen=False, poll_interval=0.01)
        for _ in range(_MAX_ROUNDS):
            # What `saga worker --burst` does between batches too: the
            # application's pollers (the sandbox provider's webhooks).
            if not worker.run_once() + sum(poller.poll() for poller in self.pollers):
                return
        # Work that keeps coming due at once (a timer re-arming in the past):
        # what the histories say is the clearer failure, if they say anything.
        problems = history_problems(self.engine, self.started)
        _expect(
            False,
            "\n".join(problems)
            or f"due work did not settle after {_MAX_ROUNDS} rounds of {worker.batch} jobs",
        )

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

    def _reach(self, saga: SagaRecord, history: Sequence[TransitionRecord]) -> None:
        self.states[saga.id] = saga.state
        self.entered.update(row.to_state for row in history)
        self.reached.update(arrows_of(history))

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

    def _at_rest(self) -> bool:
        """
        No step of a saga waits to run, nor anything the application polls.

        A crashed step retrying, one queued and not yet run, a provider's
        webhook not yet delivered: each means the database is still moving.

        ``saga verify`` checks a database at rest: a saga that has just entered
        a state whose action undoes something (a contract to void) breaks its
        rule until that action runs, and that is not a bug.
        """
        return self.queue.next_due_in(self.step_kinds) is None and all(
            poller.next_due_in() is None for poller in self.app_pollers
        )


def _clock_steps(machine: Machine) -> tuple[float, ...]:
    """Small steps, and one past every declared fixed timeout."""
    longest = max(
        (s.timeout.seconds or 0.0 for s in machine.states if s.timeout is not None), default=0.0
    )
    return tuple(sorted({1.0, 60.0, float(longest) + 1.0}))


def _own_invariants(application: Application) -> tuple[Invariant]:
    """The application's own rules (``saga verify``'s), as one invariant of the kit."""

    def own(engine: Engine) -> list[str]:
        return [
            f"{rule.name}: {problem}"
            for rule in application.invariants(engine)
            for problem in rule.problems
        ]

    own.__name__ = f"{application.name}_invariants"
    return (own,)


def saga_state_machine(
    app: Application | Machine,
    *,
    kind: str | None = None,
    url: str | None = None,
    payloads: Payloads | None = None,
    requests: SearchStrategy[Mapping[str, Any]] | None = None,
    invariants: Sequence[Invariant] = (),
    app_invariants: bool = True,
    steps: Mapping[str, Step | Callable[..., Any]] | None = None,
    clock_steps: Sequence[float] | None = None,
    setup: Setup | None = None,
    start: Starter | None = None,
    guided: bool = True,
    events: Collection[str] | None = None,
) -> type[SagaStateMachine]:
    """
    A hypothesis state machine testing saga kind ``kind`` of ``app`` on a real engine.

    Args:
        app: the application, or a machine (its actions run ``steps``, else stubs).
        kind: the saga kind (default: the application's only one).
        url: the database: SQLite in a temporary folder by default; a
            PostgreSQL URL gets a fresh schema per example, dropped after.
        payloads: a payload strategy per event name (both guard outcomes, ideally).
        requests: the strategy of start requests (default ``{}``).
        invariants: functions of the engine returning problems (or raising),
            checked besides the application's own.
        app_invariants: check the application's own invariants (those of
            ``saga verify``, ``Application(invariants=...)``) after each step
            too; ``False`` leaves them out (a test of one rule alone).
        steps: with a machine, the handler (or :class:`~saga.Step`) of each action.
        clock_steps: how far the clock may jump (default: 1 s, 60 s and just
            past the longest fixed timeout).
        setup: run on each fresh engine first (a catalogue to sell from).
        start: how a saga is started, ``start(engine, operation_id, request)``
            returning its id, when the application has its own way (default
            ``engine.sagas.start(kind, ...)``).  A refusal (any
            :class:`~saga.SagaError`) is fine: nothing is started.
        guided: coverage-guided generation (the default): each example
            enables a random part of the kit's moves (swarm testing), a rule
            steers a saga toward a declared transition the example has not
            taken, and hypothesis's ``target()`` favours examples taking more;
            ``False``: the plain random rules.
        events: the events the kit fires itself, as a person or a route
            would (default: every event but the reconciliation's outcomes).
            Leave out those only a step, a timer or a provider's webhook
            fires: fired by hand with a made-up payload they are the side door
            the application's invariants rightly catch.

    """
    application = app if isinstance(app, Application) else application_of(app, steps)
    kinds = application.registry.kinds
    chosen = kind or (kinds[0] if len(kinds) == 1 else None)
    if chosen is None:
        msg = f"name the saga kind to test: one of {', '.join(kinds)}"
        raise ValueError(msg)
    machine = application.registry.get(chosen).machine
    unknown = sorted(set(events or ()) - set(machine.events))
    if unknown:
        msg = f"events {', '.join(unknown)} are not {chosen}'s: {', '.join(machine.events)}"
        raise ValueError(msg)
    namespace: dict[str, Any] = {
        "app": application,
        "kind": chosen,
        "base_url": url,
        "hints": payloads,
        "user_invariants": tuple(invariants),
        "own_invariants": _own_invariants(application) if app_invariants else (),
        "clock_steps": tuple(clock_steps) if clock_steps is not None else _clock_steps(machine),
        "setup": (setup,) if setup is not None else (),
        "starter": (start,) if start is not None else (),
        "guided": guided,
        "decided_elsewhere": frozenset(
            event
            for policy in application.recon_policies().values()
            for event in policy.outcomes.values()
        )
        | (frozenset(machine.events) - frozenset(events) if events is not None else frozenset()),
        "coverage": Coverage.of(machine),
    }
    if requests is not None:
        namespace["requests"] = requests
    return type(f"{chosen.title().replace('_', '')}Sagas", (SagaStateMachine,), namespace)


def run_saga_test(
    app: Application | Machine,
    *,
    max_examples: int = 50,
    steps_per_example: int = 30,
    seed: int | None = None,
    **options: Any,
) -> Coverage:
    """
    Build :func:`saga_state_machine` and run it now (a failure raises, shrunk).

    Returns the run's :class:`~saga.testing.Coverage` (the states and declared
    transitions its sagas reached) and prints it, after a failure too; the
    pytest plugin repeats it in the terminal summary.  ``seed`` fixes
    hypothesis's random choices (a run to reproduce, a figure to compare),
    and leaves out hypothesis's example database.
    """
    machine = saga_state_machine(app, **options)
    if seed is not None:
        machine = hypothesis_seed(seed)(machine)
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=max_examples,
                stateful_step_count=steps_per_example,
                deadline=None,
                # Shrinking gives the shortest story; "explain" would rerun it
                # many more times to annotate lines, which costs more than it tells.
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
                report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow],
                # A seeded run is one to reproduce: no failure saved by an
                # earlier run is replayed first.
                **({"database": None} if seed is not None else {}),  # type: ignore[arg-type]
            ),
        )
    finally:
        REPORTS.append(machine.coverage)
        print(machine.coverage.report())  # noqa: T201 - the report is for the person running it
    return machine.coverage
