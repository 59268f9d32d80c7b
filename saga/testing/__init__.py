"""
Property-based tests of your own sagas, on a real engine, with a movable clock.

``pip install 'saga-engine[testing]'`` (hypothesis).  The short way::

    from saga.testing import run_saga_test

    def test_approvals():
        run_saga_test(app, payloads={"approve": st.sampled_from([{"signature": "ann"}, {}])})

That drives the approval saga through random starts, events (declared and
not), stale decisions, clock jumps past its timeouts, due work run inline
and crashing steps, on SQLite (``url=`` a PostgreSQL URL to run it there),
and checks after each step that the engine did what ``Machine.decide``
says and that every saga's history follows the definition: versions
contiguous, one audit row per transition, every transition declared,
terminal states left only by declared compensations, a timer firing once per
deadline and never early; then the application's own invariants (those of
``saga verify``).  Add the test's own rules with ``invariants=``.

The pieces, for tests of your own: :func:`events`, :func:`payloads` and
:func:`event_sequences` (strategies from a machine), :func:`saga_state_machine`
(the hypothesis state machine, ``.TestCase`` for unittest/pytest),
:class:`SagaClock` (time passes without sleeping), :func:`run_due` (the
worker's due work, inline), :func:`history_problems` (the generic checks),
and the pytest fixtures of :mod:`saga.testing.plugin`.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401 - the testing extra is required
except ImportError as exc:  # pragma: no cover - the test extra installs it
    msg = "saga.testing needs hypothesis: pip install 'saga-engine[testing]'"
    raise ImportError(msg) from exc

from saga.testing._build import run_saga_test, saga_state_machine
from saga.testing._checks import history_problems
from saga.testing._clock import SagaClock
from saga.testing._coverage import Coverage
from saga.testing._run import run_due
from saga.testing._stateful import SagaStateMachine
from saga.testing._strategies import UNDECLARED, event_sequences, events, payloads
from saga.testing._support import application_of

__all__ = [
    "UNDECLARED",
    "Coverage",
    "SagaClock",
    "SagaStateMachine",
    "application_of",
    "event_sequences",
    "events",
    "history_problems",
    "payloads",
    "run_due",
    "run_saga_test",
    "saga_state_machine",
]
