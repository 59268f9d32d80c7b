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
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
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
from saga.core.handlers import Handlers, JobKind, Step
from saga.core.queue import Job, Queue
from saga.core.refusals import allowed_origins
from saga.core.sagas import Fired, Registry, fire_in
from saga.core.supervisor import builtin_handlers
from saga.core.worker import Worker
from saga.exceptions import SagaError, TransitionNotAllowed, VersionConflict
from saga.testing._checks import history_problems
from saga.testing._clock import SagaClock
from saga.testing._strategies import Payloads, events, payloads
from state_machine import ORIGINS
from steps import TransientError

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from state_machine import Machine

Invariant = Callable[[Engine], "Iterable[str] | None"]
Starter = Callable[[Engine, str, Mapping[str, Any]], str]
Setup = Callable[[Engine], object]
# Rounds of due work one `saga worker --burst` step may take before the kit
# calls it a loop.
_MAX_ROUNDS = 20


def _expect(ok: bool, message: str) -> None:
    """Fail the example with ``message`` (hypothesis shrinks and prints the steps)."""
    if not ok:
        raise AssertionError(message)


def _stub(job: Job) -> None:
    del job


def application_of(
    machine: Machine, steps: Mapping[str, Step | Callable[..., Any]] | None
) -> Application:
    """An application of one machine; actions without a given step run a stub."""
    actions = {action for state in machine.states for action in state.actions}
    given = dict(steps or {})
    made: dict[str, Step] = {}
    for action in sorted(actions):
        step = given.get(action, _stub)
        made[action] = step if isinstance(step, Step) else Step(step)
    registry = Registry()
    registry.register(machine, steps=made)
    return Application(name=f"{machine.name}-test", registry=registry)


@dataclass
class _Faults:
    """The next step to run raises a transient error (once)."""

    armed: bool = False
    injected: int = 0

    def wrap(self, kind: JobKind) -> JobKind:
        handler = kind.handler

        def crashing(job: Job) -> Any:
            if self.armed:
                self.armed = False
                self.injected += 1
                raise TransientError(f"injected crash in {kind.name}")
            return handler(job)

        return replace(kind, handler=crashing)


@dataclass
class _Database:
    """A fresh database for one example: a SQLite file, or a PostgreSQL schema."""

    url: str
    cleanup: Callable[[], None] = field(default=lambda: None)

    @classmethod
    def fresh(cls, base: str | None, *, template: Path | None = None) -> _Database:
        if base is None or base.startswith("sqlite"):
            folder = Path(tempfile.mkdtemp(prefix="saga-test-"))
            if template is not None:
                shutil.copyfile(template, folder / "saga.db")
            return cls(f"sqlite:///{folder / 'saga.db'}", lambda: shutil.rmtree(folder, True))
        name = f"saga_test_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(base)
        with admin.begin() as conn:
            conn.execute(sa.schema.CreateSchema(name))
        separator = "&" if "?" in base else "?"

        def drop() -> None:
            # The schema, and those derived from it (the purchase's sandbox
            # provider keeps its own, "<schema>_sandbox").
            with admin.begin() as conn:
                for schema in sa.inspect(conn).get_schema_names():
                    if schema == name or schema.startswith(f"{name}_"):
                        conn.execute(sa.schema.DropSchema(schema, cascade=True))
            admin.dispose()

        return cls(f"{base}{separator}options=-csearch_path%3D{name}", drop)


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
    _template_file: ClassVar[Path | None] = None

    sagas = Bundle("sagas")

    @property
    def machine(self) -> Machine:
        return self.app.registry.get(self.kind).machine

    @initialize()
    def open(self) -> None:
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
        if engine is not None:
            engine.close()
            self.database.cleanup()

    def _fire(self, saga: str, event: str, payload: Mapping[str, Any], **options: Any) -> Fired:
        # The kit plays every door: it fires an event as one its machine lets fire it.
        saga_type = self.engine.registry.get(self.kind)
        allowed = allowed_origins(saga_type.machine, saga_type.recon_outcomes, event)
        origin = next(o for o in ORIGINS if o in allowed)
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
        event = data.draw(events(self.machine), label="event")
        payload = data.draw(payloads(event, self.hints), label="payload")
        before = self.engine.sagas.get(saga)
        self._say(
            f"saga instances fire {saga} {event} --payload "
            f"'{json.dumps(dict(payload), sort_keys=True)}'   # in {before.state} v{before.version}"
        )
        try:
            expected = self.machine.decide(before.state, event, before.data, payload)
        except TransitionNotAllowed:
            expected = None
            refused = True
        else:
            refused = False
        try:
            fired = self._fire(saga, event, payload)
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

    @rule(saga=sagas, data=st.data())
    def fire_stale(self, saga: str, data: st.DataObject) -> None:
        before = self.engine.sagas.get(saga)
        if before.version < 2:
            return
        event = data.draw(events(self.machine, undeclared=False), label="event")
        payload = data.draw(payloads(event, self.hints), label="payload")
        self._say(f"saga instances fire {saga} {event} --expected-version {before.version - 1}")
        try:
            self._fire(saga, event, payload, expected_version=before.version - 1)
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
        self._say(f"# the clock moves {seconds:g} s")
        self.clock.advance(seconds)

    @rule()
    def run_due_work(self) -> None:
        self._say("saga worker --burst")
        worker = Worker(self.engine.db, self.handlers, listen=False, poll_interval=0.01)
        for _ in range(_MAX_ROUNDS):
            if not worker.run_once():
                return
        # Work that keeps coming due at once (a timer re-arming in the past):
        # what the histories say is the clearer failure, if they say anything.
        problems = history_problems(self.engine, self.started)
        _expect(
            False,
            "\n".join(problems)
            or f"due work did not settle after {_MAX_ROUNDS} rounds of {worker.batch} jobs",
        )

    @rule()
    def crash_next_step(self) -> None:
        self._say("# the next step crashes (a transient error; it is retried)")
        self.faults.armed = True

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def histories_follow_the_definition(self) -> None:
        if not hasattr(self, "engine"):
            return
        problems = history_problems(self.engine, self.started)
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

    def _at_rest(self) -> bool:
        """
        No step of a saga waits to run (a crashed one retrying, one queued and not yet run).

        ``saga verify`` checks a database at rest: a saga that has just entered
        a state whose action undoes something (a contract to void) breaks its
        rule until that action runs, and that is not a bug.
        """
        return self.queue.next_due_in(self.step_kinds) is None


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

    """
    application = app if isinstance(app, Application) else application_of(app, steps)
    kinds = application.registry.kinds
    chosen = kind or (kinds[0] if len(kinds) == 1 else None)
    if chosen is None:
        msg = f"name the saga kind to test: one of {', '.join(kinds)}"
        raise ValueError(msg)
    machine = application.registry.get(chosen).machine
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
    }
    if requests is not None:
        namespace["requests"] = requests
    return type(f"{chosen.title().replace('_', '')}Sagas", (SagaStateMachine,), namespace)


def run_saga_test(
    app: Application | Machine,
    *,
    max_examples: int = 50,
    steps_per_example: int = 30,
    **options: Any,
) -> None:
    """Build :func:`saga_state_machine` and run it now (a failure raises, shrunk)."""
    machine = saga_state_machine(app, **options)
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
        ),
    )
