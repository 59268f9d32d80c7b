"""
Without Chromium the console's browser tests skip cleanly, except under ``CI=true``.

A newcomer's first ``pytest`` on a machine without the browser must end
green: the skip comes before any database or console is set up, so there is
nothing to tear down and no error.  CI installs the browser: there a missing
one fails the run instead of hiding the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.test_console_browser import CHROMEDRIVER, CHROMIUM

ROOT = Path(__file__).resolve().parents[2]


def run_browser_tests(*, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"),
            "tests/browser/test_console_browser.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_browser():
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        pytest.skip("the browser is installed: its tests run for real")


def test_without_the_browser_every_browser_test_skips_and_none_errs():
    done = run_browser_tests(ci=False)
    assert 0 == done.returncode, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert "skipped" in summary, summary
    assert "error" not in summary, summary
    assert "failed" not in summary, summary


def test_under_ci_a_missing_browser_fails_the_run():
    done = run_browser_tests(ci=True)
    assert 0 != done.returncode, done.stdout
    assert "CI=true" in done.stdout
    assert "skipped" not in done.stdout.strip().splitlines()[-1]
