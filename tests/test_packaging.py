"""The wheel: three import packages, the SQL inside `saga`, no top-level `sql`."""

from __future__ import annotations

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
        "import saga.core.sqlfiles as s; "
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
