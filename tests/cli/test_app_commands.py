"""Commands belong to applications: an application's own commands, and only under it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from saga.cli import Command, Commands, main
from tests import commands_app
from tests.helpers import engine_on

MINE = "tests.commands_app:app"


def _open(db_url, capsys, *extra):
    with engine_on(db_url, app=commands_app.app()):
        pass  # the schema, upgraded (PostgreSQL needs `saga db upgrade`)
    capsys.readouterr()
    assert 0 == main(["--app", MINE, "--db", db_url, *extra, "open", "--operation-id", "op-1"])
    return json.loads(capsys.readouterr().out)["id"]


def test_an_application_runs_its_own_two_commands(db_url, capsys):
    """`saga --app mine:app open|count`, on both backends."""
    saga_id = _open(db_url, capsys)
    assert 0 == main(["--db", db_url, "count", saga_id, "--times", "2", "--app", MINE])
    assert f"tally {saga_id}: 2 ticks\n" == capsys.readouterr().out
    assert 0 == main(["--app", MINE, "--db", db_url, "--json", "instances", "show", saga_id])
    assert "open" == json.loads(capsys.readouterr().out)["state"]


def test_an_applications_option_is_taken_before_or_after_its_command(db_url, capsys):
    saga_id = _open(db_url, capsys, "--label", "counter")
    assert 0 == main(["--app", MINE, "--db", db_url, "count", saga_id, "--label", "abacus"])
    assert f"abacus {saga_id}: 1 ticks\n" == capsys.readouterr().out


def test_a_bad_value_of_an_applications_option_is_exit_2_naming_it(sqlite_url, capsys):
    argv = ["--app", MINE, "--db", sqlite_url, "--label", "two words", "open"]
    assert 2 == main([*argv, "--operation-id", "op-1"])
    assert "saga: error: --label: expected a word, got 'two words'" in capsys.readouterr().err


def test_an_applications_command_error_names_its_flag(sqlite_url, capsys):
    saga_id = _open(sqlite_url, capsys)
    assert 2 == main(["--app", MINE, "--db", sqlite_url, "count", saga_id, "--times", "0"])
    assert "saga: error: --times: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["intensive", "purchase", "sandbox", "demo", "chaos"])
def test_the_purchases_commands_do_not_exist_under_another_application(command, capsys):
    """argparse's own "invalid choice", exit 2: not an AttributeError at run time."""
    assert 2 == main(["--app", MINE, command, "list"])
    err = capsys.readouterr().err
    assert f"invalid choice: '{command}'" in err
    assert "'open'" in err  # the application's own commands are offered
    assert "Traceback" not in err


def test_the_purchases_option_does_not_exist_under_another_application(sqlite_url, capsys):
    assert 2 == main(["--app", MINE, "--db", sqlite_url, "stats", "--sandbox-db", "x"])
    assert "unrecognized arguments: --sandbox-db" in capsys.readouterr().err


def test_the_applications_commands_do_not_exist_under_the_purchase(capsys):
    assert 2 == main(["count", "x"])
    assert "invalid choice: 'count'" in capsys.readouterr().err


def test_help_lists_the_applications_commands_and_options(capsys):
    assert 0 == main(["--app", MINE, "--help"])
    listed = capsys.readouterr().out
    assert "    open" in listed
    assert "    count" in listed
    assert "--label WORD" in listed
    assert "    purchase" not in listed
    assert "--sandbox-db" not in listed


def test_a_command_with_an_engines_name_is_refused(monkeypatch, capsys):
    """An application cannot shadow `stats`: exit 2 on --app, before anything runs."""

    def clashing():
        made = commands_app.app()
        stats = Command(name="stats", run=lambda args, engine: 0)
        return type(made)(
            name=made.name, registry=made.registry, commands=Commands(commands=(stats,))
        )

    monkeypatch.setattr(commands_app, "clashing", clashing, raising=False)
    assert 2 == main(["--app", "tests.commands_app:clashing", "stats"])
    assert "--app: the tallies application's command 'stats'" in capsys.readouterr().err


def test_the_purchases_webhook_deliver_does_not_exist_under_another_application(capsys):
    """`webhook serve` is the engine's; `webhook deliver` (its provider's events) the purchase's."""
    assert 2 == main(["--app", MINE, "webhook", "deliver", "--event-id", "e"])
    assert "invalid choice: 'deliver'" in capsys.readouterr().err
    assert 0 == main(["--app", MINE, "webhook", "--help"])
    assert "deliver" not in capsys.readouterr().out
    assert 0 == main(["webhook", "--help"])
    assert "deliver" in capsys.readouterr().out


def test_an_action_joins_only_a_group_of_the_engines(monkeypatch, capsys):
    def joining():
        made = commands_app.app()
        action = Command(name="recon purge", register=lambda actions: {})
        return dataclasses.replace(made, commands=Commands(commands=(action,)))

    monkeypatch.setattr(commands_app, "joining", joining, raising=False)
    assert 2 == main(["--app", "tests.commands_app:joining", "stats"])
    assert "command 'recon purge': an action joins one of the engine's groups (webhook)" in (
        capsys.readouterr().err
    )


def test_a_command_declared_twice_is_refused(monkeypatch, capsys):
    def twice():
        made = commands_app.app()
        return dataclasses.replace(
            made, commands=Commands(commands=(*made.commands.commands, made.commands.commands[0]))
        )

    monkeypatch.setattr(commands_app, "twice", twice, raising=False)
    assert 2 == main(["--app", "tests.commands_app:twice", "--help"])
    assert "--app: the tallies application's command 'open' is declared 2 times" in (
        capsys.readouterr().err
    )


def test_a_command_gives_run_or_register():
    with pytest.raises(ValueError, match="give run"):
        Command(name="neither")


def test_the_worker_hands_the_applications_options_to_its_processes(db_url, monkeypatch, capsys):
    """Each worker process loads `--app` and configures it with the same values."""
    seen = []

    class Stopped(Exception):
        pass

    class Recording:
        def __init__(self, options, concurrency):
            seen.append(options)
            self.restarts = 0

        def run(self):
            raise Stopped

    with engine_on(db_url, app=commands_app.app()):
        pass
    monkeypatch.setattr("saga.core.workers.supervisor.Supervisor", Recording)
    argv = ["--app", MINE, "--db", db_url, "worker", "--burst", "--label", "abacus"]
    assert 1 == main(argv)  # the recording supervisor stops there
    assert "Stopped" in capsys.readouterr().err
    assert (("label", "abacus"),) == seen[0].app_options


def test_an_application_configured_keeps_its_commands_and_ignores_others_values():
    app = commands_app.app()
    configured = app.configured({"label": "abacus", "sandbox_db": "sqlite:///x.db"})
    assert configured.commands is app.commands
    assert "abacus" == configured.services(None).label
    assert configured.configured({"label": None}).services(None).label == "tally"
