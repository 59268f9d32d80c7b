"""The wheel: three import packages, the SQL inside `saga`, no top-level `sql`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("*.whl")
    return path


def test_top_level_names(wheel):
    """Only saga, steps and state_machine are importable from the wheel."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert {"saga", "steps", "state_machine"} == tops


def test_sql_files_ship_inside_saga(wheel):
    """Every .sql file of the repository is in the wheel under saga/_sql/."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"saga/_sql/{p.relative_to(ROOT / 'sql').as_posix()}" for p in (ROOT / "sql").rglob("*.sql")
    }
    assert expected
    assert expected <= names


def test_typed_packages(wheel):
    """Each package ships py.typed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"saga/py.typed", "steps/py.typed", "state_machine/py.typed"} <= names


def test_installed_wheel_reads_its_own_sql(wheel, tmp_path):
    """Unpacked alone, the wheel loads its queries from saga/_sql, not from a checkout."""
    zipfile.ZipFile(wheel).extractall(tmp_path)
    code = (
        "import saga.core.store.sqlfiles as s; "
        "print(s._root()); print(len(s.queries('postgres')), len(s.migrations('sqlite')))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    root, counts = done.stdout.splitlines()
    assert root.startswith(str(tmp_path))
    assert int(counts.split()[0]) > 10


def test_examples_ship_with_their_sql(wheel):
    """The example applications of the docs are in the wheel, the enrollment's SQL beside it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    examples = ROOT / "saga" / "examples"
    expected = {
        f"saga/examples/{p.relative_to(examples).as_posix()}"
        for p in [*examples.glob("*.py"), *examples.rglob("*.sql")]
    }
    assert {"saga/examples/approvals.py", "saga/examples/enrollment.py"} <= expected
    assert any(name.endswith(".sql") for name in expected)
    assert expected <= names


@pytest.mark.slow
def test_installed_wheel_runs_the_examples(wheel, tmp_path):
    """`saga --app saga.examples.…:app` works from the wheel alone, its SQL read from it."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("SAGA_APP", None)

    def saga(*args):
        return subprocess.run(
            [sys.executable, "-m", "saga", *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout

    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import saga.examples.enrollment as e; print(e.SQL.where('sqlite'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(site))
    assert "approved" in saga("diagram", "--app", "saga.examples.approvals:app")
    db = ("--db", f"sqlite:///{tmp_path / 'examples.db'}")
    upgraded = json.loads(
        saga("db", "upgrade", "--app", "saga.examples.enrollment:app", *db, "--json")
    )
    assert "enrollment/0001_contracts" in json.dumps(upgraded)
    saga("verify", "--app", "saga.examples.enrollment:app", *db)
