"""
``--app MODULE:NAME``: what the CLI says when the application cannot be loaded.

The user's own error (in their module or their factory) is shown with its
traceback, exit 2; anything that is not an application is named; the module
is found in the working directory, as ``python -m`` finds it.
"""

from __future__ import annotations

import sys
import textwrap
import uuid

import pytest

from saga import Engine
from saga.cli import main
from saga.core.app_loading import load_app
from saga.exceptions import ApplicationLoadFailed, InvalidInput
from tests import schemas
from tests.helpers import dump

APP_MODULE = """
from saga import Application
from saga.core.queue.kinds import JobKind

def typo():
    # The user's bug: a keyword Application does not take.
    return Application(name="mine", nonsense=1)

def raises():
    raise RuntimeError("the factory failed")

def fine():
    return Application(name="fine")

def two(first, second):
    return None

def jobs(engine):
    # The form from before applications: job kinds added to the purchase, no more.
    return [JobKind("mine.noop", lambda job: None, queue="mine")]

class Shop:
    pass

value = 3
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's module in a directory of their own, on sys.path; its (unique) name."""
    name = f"user_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def upgraded(db_url):
    with Engine(db_url, check_schema=False) as setup:
        schemas.migrate(setup)
    return db_url


def _refused(upgraded, capsys, spec):
    """Run a command with ``--app spec``: its exit code, its stderr, and the database untouched."""
    with Engine(upgraded) as engine:
        before = dump(engine)
    capsys.readouterr()
    code = main(["instances", "list", "--app", spec, "--db", upgraded])
    err = capsys.readouterr().err
    with Engine(upgraded) as engine:
        assert before == dump(engine)
    return code, err


def test_an_error_in_the_users_factory_is_shown_with_its_traceback(upgraded, user_module, capsys):
    """A TypeError inside the factory is the user's, not taken for a job factory's signature."""
    code, err = _refused(upgraded, capsys, f"{user_module}:typo")
    assert 2 == code
    assert "Traceback (most recent call last)" in err
    assert 'return Application(name="mine", nonsense=1)' in err  # the user's line
    assert f"{user_module}.py" in err
    assert err.rstrip().endswith(
        f"saga: error: --app: could not load application '{user_module}:typo': TypeError: "
        "Application.__init__() got an unexpected keyword argument 'nonsense'"
    )
    assert "saga/core/app_loading.py" not in err  # the loader's frames are not the user's business


def test_any_error_in_the_factory_is_shown(upgraded, user_module, capsys):
    code, err = _refused(upgraded, capsys, f"{user_module}:raises")
    assert 2 == code
    assert "RuntimeError: the factory failed" in err
    assert "Traceback (most recent call last)" in err


def test_an_error_while_importing_the_module_is_shown(tmp_path, monkeypatch, capsys, upgraded):
    """A module that raises as it is imported, or imports what is missing: the user's bug."""
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = _refused(upgraded, capsys, f"{name}:app")
    assert 2 == code
    assert "import no_such_dependency_here" in err
    assert "ModuleNotFoundError: No module named 'no_such_dependency_here'" in err
    assert "importlib" not in err


def test_a_missing_module_is_named_without_a_traceback(upgraded, capsys):
    code, err = _refused(upgraded, capsys, "no_such_module_here:app")
    assert 2 == code
    assert "Traceback" not in err
    assert "--app: cannot import 'no_such_module_here'" in err
    assert "working directory" in err


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("two", "takes 2 arguments"),
        ("Shop", "is the class"),
        ("value", "is a value of type int"),
        ("missing", "has no 'missing'"),
    ],
)
def test_what_is_not_an_application_is_named(user_module, name, found):
    with pytest.raises(InvalidInput) as refused:
        load_app(f"{user_module}:{name}")
    assert "app" == refused.value.field
    assert found in refused.value.problem


def test_the_factory_form_loads(user_module):
    assert "fine" == load_app(f"{user_module}:fine").name


def test_a_job_factory_is_no_application_any_more(user_module, upgraded, capsys):
    """The shim of before applications (job kinds added to the purchase) is gone: refused."""
    with pytest.raises(InvalidInput, match="takes 1 arguments: a function returning an"):
        load_app(f"{user_module}:jobs")
    code, err = _refused(upgraded, capsys, f"{user_module}:jobs")
    assert 2 == code
    assert "Application takes none" in err


def test_the_load_error_survives_pickling():
    """A worker process's load error reaches the supervisor whole."""
    import pickle

    error = ApplicationLoadFailed(spec="m:f", error="TypeError: x", traceback="Traceback ...")
    copy = pickle.loads(pickle.dumps(error))
    assert vars(error) == vars(copy)
    assert "app" == copy.field


def test_the_module_is_found_in_the_working_directory(tmp_path, monkeypatch, upgraded, capsys):
    """`saga --app approvals:app` run where approvals.py is: no PYTHONPATH=. needed."""
    name = f"approvals_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("from saga.examples.approvals import app\n")
    monkeypatch.chdir(tmp_path)
    # As under the `saga` console script: the working directory is not on the path.
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])
    capsys.readouterr()
    spec = f"{name}:app"
    assert 0 == main(["instances", "list", "--kind", "approval", "--app", spec, "--db", upgraded])
    assert "approval" in load_app(spec).registry.kinds
