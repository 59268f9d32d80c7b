"""Imports point one way: saga → steps → state_machine, and state_machine is pure."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "state_machine": {"saga", "steps"},
    "steps": {"saga"},
    "saga": set(),
}
# state_machine is pure: no I/O, no clock, no randomness, no third-party code.
PURE_ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "re",
    "types",
    "typing",
    "state_machine",
    "functools",
    "itertools",
}


def imports(package: str) -> list[tuple[Path, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.module))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    """No package imports a layer above it."""
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports(package)
        if module.split(".")[0] in FORBIDDEN[package]
    ]
    assert [] == bad


def test_state_machine_uses_only_pure_stdlib():
    """The machine package imports nothing that does I/O."""
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports("state_machine")
        if module.split(".")[0] not in PURE_ALLOWED
    ]
    assert [] == bad
    assert all(
        name in sys.stdlib_module_names or name == "state_machine"
        for name in PURE_ALLOWED - {"__future__"}
    )
