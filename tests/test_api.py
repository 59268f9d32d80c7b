"""
The public API: a short top level, namespaces for the rest, every name documented.

An entry in docs/api.md is a table row whose first cell is the name in
backticks, under the heading naming its module (``## `saga.queue` ``).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import saga

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "api.md"
# What a user imports: `saga` and its namespaces (tests/unit/test_layers.py
# holds the purchase and the examples to these).
PUBLIC_MODULES = (
    "saga",
    "saga.sagas",
    "saga.queue",
    "saga.events",
    "saga.recon",
    "saga.store",
    "saga.ops",
    "saga.faults",
    "saga.exceptions",
    "saga.cli",
    "saga.testing",
    "saga.codec",
    "saga.validation",
)
# The modules under `saga` that are not an API to import, and why.
NOT_IMPORTED_BY_USERS = {
    "saga.core": "the engine's inside",
    "saga.purchase": "the reference application",
    "saga.examples": "applications written with the API",
    "saga.web": "the HTTP face, run by `saga console` and `saga webhook serve`",
    "saga.settings": "the default application's name",
}
TOP_LEVEL_MAX = 30


def documented() -> dict[str, list[str]]:
    """The names docs/api.md has a row for, by the module heading above them."""
    rows: dict[str, list[str]] = {}
    module = None
    for line in API_PAGE.read_text(encoding="utf-8").splitlines():
        if heading := re.fullmatch(r"## `([\w.]+)`", line):
            module = heading.group(1)
            rows[module] = []
        elif (row := re.match(r"\| `(\w+)` \|", line)) and module is not None:
            rows[module].append(row.group(1))
    return rows


def test_the_top_level_keeps_to_a_few_names():
    assert len(saga.__all__) <= TOP_LEVEL_MAX


def test_every_module_under_saga_is_public_or_said_not_to_be():
    found = {
        f"saga.{path.stem}"
        for path in (ROOT / "saga").iterdir()
        if not path.name.startswith("_")
        and (path.suffix == ".py" or (path / "__init__.py").is_file())
    }
    assert sorted(found) == sorted({*PUBLIC_MODULES, *NOT_IMPORTED_BY_USERS} - {"saga"})


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_a_public_module_says_what_it_is_and_lists_its_names_once(module):
    loaded = importlib.import_module(module)
    assert (loaded.__doc__ or "").strip()
    assert len(set(loaded.__all__)) == len(loaded.__all__)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_imports(module):
    """`from MODULE import NAME` works for every name of its `__all__`."""
    for name in importlib.import_module(module).__all__:
        namespace: dict[str, object] = {}
        exec(f"from {module} import {name}", namespace)  # noqa: S102 - the names are the API's
        assert name in namespace


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_has_its_entry_in_the_api_page(module):
    names = importlib.import_module(module).__all__
    rows = documented().get(module, [])
    missing = [f"{module}.{name} has no row in docs/api.md" for name in names if name not in rows]
    stale = [f"docs/api.md: {module}.{name} is not public" for name in rows if name not in names]
    assert [] == missing
    assert [] == stale
    assert len(set(rows)) == len(rows)


def test_the_api_page_has_a_section_per_public_module():
    assert list(PUBLIC_MODULES) == list(documented())


def test_the_api_pages_links_reach_a_heading():
    """Each `(page.md#anchor)` names a page of docs/ and a heading on it (GitHub's anchors)."""
    text = API_PAGE.read_text(encoding="utf-8")
    bad = []
    for page, anchor in set(re.findall(r"\]\(([\w-]+\.md)(?:#([\w-]+))?\)", text)):
        target = ROOT / "docs" / page
        if not target.is_file():
            bad.append(page)
            continue
        headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.MULTILINE)
        slugs = {re.sub(r"[^\w -]", "", h.lower()).replace(" ", "-") for h in headings}
        if anchor and anchor not in slugs:
            bad.append(f"{page}#{anchor}")
    assert [] == sorted(bad)


def test_the_top_level_is_typed_as_it_loads():
    """The names type checkers see in `saga/__init__.py` are the ones it loads, from there."""
    tree = ast.parse((ROOT / "saga" / "__init__.py").read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    typed = {
        alias.asname: (statement.module, alias.name)
        for statement in block.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert typed == {name: (module, name) for name, module in saga._HOMES.items()}
