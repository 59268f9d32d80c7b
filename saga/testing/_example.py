"""
The world one example of the kit runs in, and the moves its rules share.

:class:`_Example` opens a fresh database and engine per example (a copy of a
migrated SQLite template, or a PostgreSQL schema), with the movable clock,
the injected crashes and the queue; it fires events as the kit, writes the
lines a person can replay, moves the clock, runs the due work inline and
says when the database is at rest.  The rules hypothesis draws are
:class:`~saga.testing.SagaStateMachine`'s (:mod:`saga.testing._stateful`).
"""

from __future__ import annotations

import atexit
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hypothesis import note, target
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize

from saga.core.engine import Engine
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.sagas.refusals import allowed_origins
from saga.core.sagas.transitions import fire_in
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.testing._checks import history_problems
from saga.testing._clock import SagaClock
from saga.testing._coverage import Arrow, Coverage, arrows_of, declared_arrows
from saga.testing._support import _Database, _Faults
from saga.testing._swarm import _ALL_ON, _swarms
from state_machine import OPERATOR, ORIGINS

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from saga.core.app import Application
    from saga.core.sagas.changes import Fired
    from saga.core.store.records import SagaRecord, TransitionRecord
    from saga.testing._strategies import Payloads
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


class _Example(RuleBasedStateMachine):
    """One example's engine, database, clock and faults; the rules are the subclass's."""

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

    def _advance(self, seconds: float) -> None:
        self._say(f"# the clock moves {seconds:g} s")
        self.clock.advance(seconds)

    def _to_due_work(self) -> None:
        waits = [self.queue.next_due_in(self.job_kinds)]
        waits += [poller.next_due_in() for poller in self.app_pollers]
        wait = min((w for w in waits if w is not None), default=None)
        if wait is not None and wait > 0:
            self._advance(math.ceil(wait) + 1.0)

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

    def _reach(self, saga: SagaRecord, history: Sequence[TransitionRecord]) -> None:
        self.states[saga.id] = saga.state
        self.entered.update(row.to_state for row in history)
        self.reached.update(arrows_of(history))

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
