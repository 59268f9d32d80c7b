"""
The kit's state machine built for one saga kind of an application, and run.

:func:`saga_state_machine` makes a :class:`~saga.testing.SagaStateMachine`
subclass for the kind; :func:`run_saga_test` runs it now under hypothesis,
which shrinks a failure to the shortest sequence and prints it as lines a
person can replay with the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.stateful import run_state_machine_as_test

from saga.core.app import Application
from saga.testing._coverage import REPORTS, Coverage
from saga.testing._stateful import SagaStateMachine
from saga.testing._support import application_of

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from hypothesis.strategies import SearchStrategy

    from saga.core.engine import Engine
    from saga.core.queue.kinds import Step
    from saga.testing._example import Invariant, Setup, Starter
    from saga.testing._strategies import Payloads
    from state_machine import Machine


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
