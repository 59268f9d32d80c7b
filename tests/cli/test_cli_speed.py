"""
What keeps the CLI fast: commands import the engine only when they run, and
the embedded database needs no SQLAlchemy.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import subprocess
import sys

import pytest

from saga.cli import _VALUED, COMMAND_MODULES, MODULES, invoked, invoked_module, main
from saga.cli.common import add_common_options
from saga.cli.worker import MAX_WORKERS
from saga.core.workers.supervisor import MAX_CONCURRENCY
from tests.helpers import engine_on


def test_help_loads_neither_sqlalchemy_nor_the_drivers():
    """`saga --help` builds every command's parser without importing the database layer."""
    assert [] == _loaded_after(["--help"])


def test_the_worker_help_names_the_supervisors_limit():
    """The limit written in the CLI is the supervisor's own."""
    assert MAX_CONCURRENCY == MAX_WORKERS


HEAVY = ("sqlalchemy", "psycopg", "pika", "structlog", "tqdm")


def _loaded_after(args: list[str], watched: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of the ``watched`` modules ``saga ARGS`` imported."""
    code = (
        "import sys\n"
        "from saga.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "finally:\n"
        f"    print(sorted(set({watched!r}) & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert 0 == done.returncode, done.stderr
    return list(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def small_db(tmp_path):
    """An embedded database with one purchase in it, and that purchase's id."""
    url = f"sqlite:///{tmp_path / 'saga.db'}"
    with engine_on(url) as engine:
        engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
        started = engine.services.purchases.start(
            operation_id="op-1", intensive_id="js", student_id="s"
        )
    return url, started.purchase.id


def test_stats_on_the_embedded_database_loads_neither_sqlalchemy_nor_the_drivers(small_db):
    """SQLite's transactions run on the stdlib driver."""
    url, _ = small_db
    assert [] == _loaded_after(["stats", "--db", url])


def test_purchase_show_on_the_embedded_database_loads_neither_sqlalchemy_nor_the_drivers(
    small_db,
):
    url, purchase_id = small_db
    assert [] == _loaded_after(["purchase", "show", purchase_id, "--db", url])


def test_a_write_on_the_embedded_database_loads_neither_sqlalchemy_nor_the_drivers(small_db):
    url, _ = small_db
    args = ["purchase", "start", "--operation-id", "op-2", "--intensive", "js", "--student", "t"]
    assert [] == _loaded_after([*args, "--db", url])


def test_a_command_on_postgres_loads_sqlalchemy_and_psycopg(postgres_url):
    """The other side: the checks above would notice a SQLite path that lost the split."""
    loaded = _loaded_after(["db", "upgrade", "--db", postgres_url])
    assert {"sqlalchemy", "psycopg"} <= set(loaded)


def test_every_command_is_in_the_table_with_the_module_that_registers_it():
    found = {}
    for name in MODULES:
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"saga.cli.{name}").register(subparsers)
        found.update(dict.fromkeys(subparsers.choices, name))
    assert found == COMMAND_MODULES


@pytest.mark.parametrize(
    ("argv", "command", "module"),
    [
        (["stats"], "stats", "queue"),
        (["--db", "sqlite:///x.db", "--json", "purchase", "show", "p"], "purchase", None),
        (["--log-level", "debug", "--db=sqlite:///stats", "verify"], "verify", "ops"),
        (["--app", "stats", "demo"], "demo", None),  # an option's value is not the command
        (["--ap", "demo", "worker"], "worker", "worker"),  # an abbreviated option takes its value
        (["--json", "--sandbox", "x", "stats"], "stats", "queue"),  # the application's option too
        (["--help"], None, None),
        (["-h", "worker"], None, None),  # help before the command lists every command
        (["--json", "--help", "stats"], None, None),
        (["no-such-command"], "no-such-command", None),
        ([], None, None),
    ],
)
def test_the_invoked_commands_module_is_found_before_parsing(argv, command, module):
    """The engine's commands by module; the application's (`purchase`, `demo`) by name."""
    valued = _VALUED | {"--sandbox-db"}
    assert (command, module) == (invoked(argv, valued), invoked_module(argv, valued))


def test_a_command_builds_only_its_own_parsers(small_db):
    url, purchase_id = small_db
    others = (
        *(f"saga.cli.{name}" for name in MODULES),
        *(f"saga.purchase.cli.{name}" for name in ("catalogue", "sandbox", "demo", "chaos")),
    )
    assert [] == _loaded_after(["purchase", "show", purchase_id, "--db", url], others)


def test_help_still_lists_every_command(capsys):
    assert 0 == main(["--help"])
    listed = capsys.readouterr().out
    purchases = ("intensive", "purchase", "sandbox", "demo", "chaos")
    assert all(f"    {name}" in listed for name in (*COMMAND_MODULES, *purchases))


def test_the_options_taken_for_values_are_the_top_level_ones_that_take_one():
    probe = argparse.ArgumentParser(add_help=False)
    add_common_options(probe, top_level=True)
    valued = {s for action in probe._actions if action.nargs != 0 for s in action.option_strings}
    assert valued == _VALUED
