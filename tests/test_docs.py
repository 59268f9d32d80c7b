"""
The Python blocks of README.md and docs/*.md run, each on its own.

A reader copies one block, not the page: every block runs in a fresh namespace
and a fresh directory, unless its first line is the marker
``# continues the example above``, which says so to the reader too; such a
block runs in the namespace (and directory) of the block before it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONTINUES = "# continues the example above"
# docs/testing.md runs the hypothesis kit for tens of seconds: the slow tier runs it.
BY_COST = [
    pytest.param(p, marks=pytest.mark.slow) if p.name == "testing.md" else p for p in DOCUMENTS
]


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def continues(block):
    return block.lstrip().startswith(CONTINUES)


def run_blocks(path, blocks, folder):
    """Run ``blocks`` of ``path`` as a reader would: each alone unless marked as continuing."""
    namespace: dict[str, object] = {}
    for number, block in enumerate(blocks, start=1):
        if not continues(block):
            namespace = {"__name__": "__docs__"}
            os.chdir(folder / f"block-{number}")
        exec(compile(block, f"{path} (python block {number})", "exec"), namespace)  # noqa: S102


@pytest.mark.parametrize("path", BY_COST, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(path, monkeypatch, tmp_path):
    """Every Python example in the documentation runs as written, on its own."""
    blocks = python_blocks(path)
    for number in range(1, len(blocks) + 1):
        (tmp_path / f"block-{number}").mkdir()
    monkeypatch.chdir(tmp_path)
    run_blocks(path, blocks, tmp_path)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_continuing_block_has_one_before_it(path):
    """The marker never opens a page: there is nothing above it to continue."""
    blocks = python_blocks(path)
    assert not (blocks and continues(blocks[0]))


def test_a_block_using_a_name_from_the_one_before_fails_unless_marked(tmp_path, monkeypatch):
    """The check itself: without the marker, a block does not see its predecessor's names."""
    for number in (1, 2):
        (tmp_path / f"block-{number}").mkdir()
    monkeypatch.chdir(tmp_path)
    first = "app = 'approvals'\n"
    with pytest.raises(NameError, match="app"):
        run_blocks(Path("example.md"), [first, "assert app\n"], tmp_path)
    run_blocks(Path("example.md"), [first, f"{CONTINUES}\nassert app\n"], tmp_path)


def test_readme_gives_the_two_setup_commands():
    """The README's test command is the one .ci/run runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = re.findall(r"```console\n(python3 -m venv[^\n]*)\n```", readme)
    assert 2 == len(commands)
    assert commands[1] in ci.splitlines()
