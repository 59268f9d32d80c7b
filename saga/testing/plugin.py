"""
pytest fixtures for testing your sagas (loaded automatically with saga-engine).

Override ``saga_app`` with your application, then use:

* ``saga_engine``: an engine on a fresh database (SQLite in the test's
  folder; ``--saga-db URL`` or ``$SAGA_TEST_DATABASE_URL`` for PostgreSQL,
  a schema of its own, dropped afterwards);
* ``saga_clock``: :class:`~saga.testing.SagaClock` of that engine
  (``saga_clock.advance(3600)``: an hour passes, nobody sleeps);
* ``saga_worker``: ``saga_worker()`` runs the due work inline.

After the tests, the terminal summary shows the coverage of every
:func:`~saga.testing.run_saga_test` run (states and declared transitions
reached).  Nothing here imports hypothesis: the fixtures work without it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from saga.core.app import Application
    from saga.core.engine import Engine
    from saga.core.workers.report import WorkerReport
    from saga.testing._clock import SagaClock


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--saga-db URL``: the database the saga fixtures use."""
    parser.addoption(
        "--saga-db",
        default=None,
        help="database for the saga_engine fixture (default $SAGA_TEST_DATABASE_URL, else SQLite)",
    )


@pytest.fixture
def saga_app() -> Application:
    """Your application: override this fixture (the default is the purchase)."""
    from saga.core.app_loading import default_app  # noqa: PLC0415 - the plugin loads lazily

    return default_app()


@pytest.fixture
def saga_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database's URL; PostgreSQL gets a schema of its own, dropped afterwards."""
    from saga.testing._support import _Database  # noqa: PLC0415

    base = request.config.getoption("--saga-db") or os.environ.get("SAGA_TEST_DATABASE_URL")
    if not base:
        yield f"sqlite:///{tmp_path / 'saga.db'}"
        return
    database = _Database.fresh(base)
    try:
        yield database.url
    finally:
        database.cleanup()


@pytest.fixture
def saga_engine(saga_app: Application, saga_database_url: str) -> Iterator[Engine]:
    """An engine running ``saga_app`` on a fresh, upgraded database."""
    from saga.core.engine import Engine  # noqa: PLC0415

    with Engine(saga_database_url, app=saga_app, check_schema=False) as setup:
        setup.upgrade()
    with Engine(saga_database_url, app=saga_app) as engine:
        yield engine


@pytest.fixture
def saga_clock(saga_engine: Engine) -> SagaClock:
    """The engine's movable clock."""
    from saga.testing._clock import SagaClock  # noqa: PLC0415

    return SagaClock(saga_engine.db)


@pytest.fixture
def saga_worker(saga_engine: Engine) -> Callable[[], WorkerReport]:
    """Run the due work inline: ``saga_worker()``."""
    from saga.testing._run import run_due  # noqa: PLC0415

    def run(**_: Any) -> WorkerReport:
        return run_due(saga_engine)

    return run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each ``run_saga_test`` run's coverage: the states and transitions its sagas reached."""
    from saga.testing._coverage import REPORTS  # noqa: PLC0415 - only if the kit ran

    if not REPORTS:
        return
    terminalreporter.section("saga.testing coverage")
    for coverage in REPORTS:
        terminalreporter.write_line(coverage.report())
