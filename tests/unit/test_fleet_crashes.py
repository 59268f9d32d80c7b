"""`saga chaos` names what a crashed worker raised: the traceback's exception line."""

from __future__ import annotations

from saga.core.workers.fleet import _raised

TRACE = """Traceback (most recent call last):
  File "saga/core/workers/worker.py", line 196, in run_once
    claimed = self.db.transaction(lambda tx: claim_in(tx, self._claim_spec()))
psycopg.OperationalError: server closed the connection unexpectedly
\tThis probably means the server terminated abnormally
\tbefore or while processing the request.
"""


def test_a_crash_is_named_by_its_exception_not_its_last_line():
    assert "psycopg.OperationalError: server closed the connection unexpectedly" == _raised(TRACE)


def test_a_chained_crash_is_named_by_the_last_exception():
    chained = TRACE + "\nThe above exception was the direct cause of the following exception:\n\n"
    chained += 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: last\n'
    assert "ValueError: last" == _raised(chained)
