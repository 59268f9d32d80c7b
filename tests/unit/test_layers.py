"""Imports point one way: saga → steps → state_machine, and state_machine is pure."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.test_api import PUBLIC_MODULES

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


def saga_graph() -> dict[str, set[str]]:
    """Every import between modules of `saga`, annotations and local imports included."""
    modules = {}
    for path in (ROOT / "saga").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for imported in targets:
                target = imported
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("saga"):
                    graph[name].add(target)
    return graph


def test_the_core_imports_no_application_and_no_cli():
    """saga.core knows no domain: it never imports saga.purchase (or the CLI)."""
    bad = [
        f"{module} imports {target}"
        for module, targets in saga_graph().items()
        if module.startswith("saga.core")
        for target in targets
        if target.startswith(("saga.purchase", "saga.examples", "saga.cli"))
    ]
    assert [] == bad


def test_no_import_cycle_in_saga():
    """No module of saga reaches itself through imports (annotations included)."""
    graph = saga_graph()
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert [] == sorted(set(cycles))[:5]


# What an application may import of the engine: its public modules, nothing under saga.core.
PUBLIC = set(PUBLIC_MODULES)
# The one exception, by name: `saga chaos --mutant` breaks the engine's own
# guards on purpose, so its mutants reach the code they patch.
MUTANTS = "saga/purchase/chaos_engine_mutants.py"


@pytest.mark.parametrize("application", ["saga/purchase", "saga/examples"])
def test_applications_use_only_the_public_api(application):
    """The purchase is built like a user's application: the public modules and its own code."""
    root = ROOT / application
    paths = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    bad = []
    for path in paths:
        if path.relative_to(ROOT).as_posix() == MUTANTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            bad += [
                f"{path.relative_to(ROOT)} imports {module}"
                for module in modules
                if module.split(".")[0] == "saga"
                and module not in PUBLIC
                and not module.startswith(application.replace("/", "."))
            ]
    assert [] == bad


def test_the_engines_tables_name_no_application_table():
    """The engine's schema and queries never touch the purchase's tables: SQL is per component."""
    from saga.core.store.sqlfiles import ENGINE, SqlComponent

    purchase = SqlComponent.bundled("purchase")
    bad = []
    for dialect in ("postgres", "sqlite"):
        tables = set()
        for migration in purchase.migrations(dialect):
            tables |= set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", migration.sql))
        assert {"intensives", "purchases", "payments", "refunds"} <= tables
        texts = {"schema.sql": ENGINE.schema(dialect) or ""}
        texts |= {f"query {q.name}": q.sql for q in ENGINE.queries(dialect).values()}
        for where, text in texts.items():
            code = re.sub(r"--[^\n]*", "", text)
            bad += [
                f"{dialect} {where} names {table}"
                for table in sorted(tables)
                if re.search(rf"\b{table}\b", code)
            ]
    assert [] == bad
