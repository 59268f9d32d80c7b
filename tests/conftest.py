"""
Shared fixtures: a database per test on SQLite and on PostgreSQL.

PostgreSQL comes from ``SAGA_TEST_POSTGRES_URL`` (default: the local server).
Each test gets a schema of its own, dropped afterwards.  Without a reachable
server the PostgreSQL tests are skipped, except under ``CI=true``, where
that is a failure: CI must never go green without them.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg import sql

from saga import Engine
from tests import schemas

if TYPE_CHECKING:
    from collections.abc import Iterator

# The RabbitMQ fixtures (broker, outage) for every test module.
pytest_plugins = ("tests.broker",)

POSTGRES_URL = os.environ.get(
    "SAGA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200
)
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300
)
settings.load_profile("ci" if IN_CI else os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


_postgres_problem: str | None = None
try:
    with psycopg.connect(_libpq_url(POSTGRES_URL), connect_timeout=5) as _conn:
        _conn.execute("SELECT 1")
except psycopg.Error as _exc:  # pragma: no cover - depends on the machine
    _postgres_problem = f"PostgreSQL unreachable at {POSTGRES_URL}: {_exc}"


def require_postgres() -> None:
    """Skip without PostgreSQL; fail under CI=true."""
    if _postgres_problem is None:
        return
    if IN_CI:
        pytest.fail(f"{_postgres_problem} (CI=true: PostgreSQL tests must run)")
    pytest.skip(_postgres_problem)


class PostgresSchema:
    """A throwaway schema on the test server, and the engine URL that targets it."""

    def __init__(self) -> None:
        self.name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(_libpq_url(POSTGRES_URL), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.name)))
        options = quote(f"-csearch_path={self.name}", safe="")
        separator = "&" if "?" in POSTGRES_URL else "?"
        self.url = f"{POSTGRES_URL}{separator}options={options}"

    def drop(self) -> None:
        """Drop the schema and the sandbox provider's schema derived from it."""
        with psycopg.connect(_libpq_url(POSTGRES_URL), autocommit=True) as conn:
            for schema in (self.name, f"{self.name}_sandbox"):
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                conn.execute(drop.format(sql.Identifier(schema)))


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema."""
    require_postgres()
    schema = PostgresSchema()
    try:
        yield schema.url
    finally:
        schema.drop()


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    """A SQLite URL of a new file in the test's temporary directory."""
    return f"sqlite:///{tmp_path}/saga.db"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn: the same test runs on SQLite and on PostgreSQL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(request.getfixturevalue("sqlite_url"))


@pytest.fixture(scope="session", autouse=True)
def _schema_templates() -> Iterator[None]:
    """The migrated templates tests/schemas.py copies from, removed at the end of the session."""
    yield
    schemas.discard()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine with an up-to-date schema (a copy of a migrated one), on each backend."""
    with Engine(db_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url) as eng:
        yield eng


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs a server by the fixtures it asks for, so `-m` can leave it out.

    ``postgres``: the test takes ``postgres_url``, or one of its parameters is
    the backend ``"postgres"`` (``db_url``, ``backend``, a module's scenario).
    ``broker``: it takes the ``broker`` or ``outage`` fixture.  A test that
    reaches a server by other means carries the marker itself.
    """
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        if "postgres_url" in names or "postgres" in params:
            item.add_marker(pytest.mark.postgres)
        if names & {"broker", "outage"}:
            item.add_marker(pytest.mark.broker)


@pytest.fixture
def cheap_password_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    Operators' passwords hashed with argon2's cheapest parameters (argon2-cffi's test profile).

    The defaults cost a fifth of a second a hash or a check by design, several
    times in each console test; the console's logic is the same either way.  A
    console in a process of its own, and the CLI, still hash with the defaults.
    """
    from argon2 import PasswordHasher, profiles

    monkeypatch.setattr(
        "saga.core.ops.operators._hasher",
        lambda: PasswordHasher.from_parameters(profiles.CHEAPEST),
    )
    # The decoy hash made once per process: made anew, and cheaply, for the test.
    monkeypatch.setattr("saga.core.ops.operators._decoy", [])


@pytest.fixture(autouse=True)
def _fresh_logging():
    """The CLI configures structlog for the process; give every test the defaults back."""
    yield
    import structlog

    structlog.reset_defaults()
