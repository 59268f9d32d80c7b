"""The Python blocks of README.md and docs/*.md run, in order, one namespace per file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(path, monkeypatch, tmp_path):
    """Every Python example in the documentation runs as written."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), namespace)  # noqa: S102 - our own docs


def test_readme_gives_the_two_setup_commands():
    """The README's test command is the one .ci/run runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = re.findall(r"```console\n(python3 -m venv[^\n]*)\n```", readme)
    assert 2 == len(commands)
    assert commands[1] in ci.splitlines()
