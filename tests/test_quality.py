"""ruff and mypy --strict are part of the test run, and modules stay short: the tree stays clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name):
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed next to {sys.executable}: install the test extras")
    return path


@pytest.mark.slow
def test_ruff_check():
    """ruff finds nothing in the packages, tests and benchmarks."""
    done = subprocess.run(
        [_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert 0 == done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_ruff_format():
    """The code is formatted by ruff."""
    done = subprocess.run(
        [_tool("ruff"), "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 == done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_strict():
    """mypy --strict (configured in pyproject.toml) passes on the three packages."""
    done = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert 0 == done.returncode, done.stdout + done.stderr


# House rule: a module over this many lines is split along its seams.
MAX_MODULE_LINES = 400


def test_no_module_of_saga_is_over_the_line_limit():
    """Every module of saga/ has at most MAX_MODULE_LINES lines (as `wc -l` counts them)."""
    over = {
        path.relative_to(ROOT).as_posix(): lines
        for path in sorted((ROOT / "saga").rglob("*.py"))
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert {} == over, "\n".join(
        f"{path}: {lines} lines (at most {MAX_MODULE_LINES})" for path, lines in over.items()
    )
