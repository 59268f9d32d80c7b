"""
Load the engine's SQL: named queries, the schema and the migrations.

Each component keeps its files in a folder per dialect: the engine's in
``sql/engine/<dialect>/``, those of the applications shipped with it in
``sql/<name>/<dialect>/``, at the top of the repository; they ship in the wheel as ``saga/_sql/``
(see ``pyproject.toml``), and a source checkout or an editable install reads
them in place.  A user's application ships its own beside its code.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

Dialect = Literal["postgres", "sqlite"]
DIALECTS: Final[tuple[Dialect, ...]] = ("postgres", "sqlite")

_HEADER = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


_SEVERAL = re.compile(r"^statements: ([2-9])$")


@dataclass(frozen=True, slots=True)
class Query:
    """
    One named query of a ``queries.sql`` file: one statement, or a declared few.

    A dialect that does in one statement what another needs several for (a
    PostgreSQL data-modifying ``WITH``; SQLite runs them in turn, in process)
    declares it with a ``-- statements: N`` line after the header: the
    statements run in order, with the same parameters, and the query's rows
    are the first statement's.
    """

    name: str
    description: str
    sql: str
    parts: int = 1

    def statements(self) -> list[str]:
        """The statements to run, in order."""
        return [self.sql] if self.parts == 1 else split_statements(self.sql)


@dataclass(frozen=True, slots=True)
class Migration:
    """One forward-only migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file, to notice an applied migration that was edited."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _root() -> Traversable:
    packaged = resources.files("saga").joinpath("_sql")
    if packaged.is_dir():
        return packaged
    # Source checkout or editable install: the files sit beside the packages.
    return Path(__file__).resolve().parents[3] / "sql"


def _read(dialect: Dialect, component: str, *parts: str) -> str:
    node = _root().joinpath(component).joinpath(dialect)
    for part in parts:
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def parse_queries(text: str) -> dict[str, Query]:
    """
    Parse a ``queries.sql`` file into its named statements.

    Each block starts with ``-- name: snake_case`` and the comment lines right
    after it are the description.  Raises :class:`ValueError` on a duplicate
    name, an empty block or text before the first header.
    """
    pieces = _HEADER.split(text)
    if pieces[0].strip() and not all(
        line.startswith("--") or not line.strip() for line in pieces[0].splitlines()
    ):
        msg = "SQL found before the first '-- name:' header"
        raise ValueError(msg)
    queries: dict[str, Query] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in queries:
            msg = f"query {name!r} is defined twice"
            raise ValueError(msg)
        lines = body.strip().splitlines()
        description = []
        parts = 1
        while lines and lines[0].startswith("--"):
            line = lines.pop(0).removeprefix("--").strip()
            several = _SEVERAL.match(line)
            if several:
                parts = int(several[1])
            else:
                description.append(line)
        sql = "\n".join(lines).strip().removesuffix(";").strip()
        if not sql:
            msg = f"query {name!r} has no statement"
            raise ValueError(msg)
        # A trigger's body holds semicolons; only then is the full split needed.
        found = len(split_statements(sql)) if ";" in _strip_comments_and_strings(sql) else 1
        if found != parts:
            msg = (
                f"query {name!r} holds more than one statement"
                if parts == 1
                else f"query {name!r} declares {parts} statements and holds {found}"
            )
            raise ValueError(msg)
        queries[name] = Query(name=name, description=" ".join(description), sql=sql, parts=parts)
    return queries


_COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SqlComponent:
    """
    One component's SQL: named queries and forward-only migrations, per dialect.

    ``root`` holds a folder per dialect (``postgres/``, ``sqlite/``), each with
    ``queries/*.sql`` (named statements, one namespace with the engine's) and
    ``migrations/NNNN_slug.sql`` (applied in order by ``saga db upgrade``, and
    recorded per component).  The engine is one component, its own
    ``schema.sql`` builds a fresh database in one step; an application brings
    its tables as another (``Application(sql=SqlComponent.in_package(...))``).

    Args:
        name: the component's name, recorded beside each of its migrations.
        root: the folder holding one folder per dialect.

    """

    name: str
    root: Traversable

    def __post_init__(self) -> None:
        if not _COMPONENT_NAME.match(self.name):
            msg = f"SQL component name {self.name!r} must be snake_case"
            raise ValueError(msg)

    @classmethod
    def in_package(cls, name: str, package: str, folder: str = "sql") -> SqlComponent:
        """The component in ``folder`` of an importable package (shipped inside it)."""
        return cls(name=name, root=resources.files(package).joinpath(folder))

    @classmethod
    def bundled(cls, name: str) -> SqlComponent:
        """A component shipped with the engine (``sql/<name>/``): its own, or an application's."""
        return cls(name=name, root=_root().joinpath(name))

    def queries(self, dialect: Dialect) -> dict[str, Query]:
        """Its named queries on ``dialect``: every ``queries/*.sql`` file, one namespace."""
        return _queries(self, dialect)

    def migrations(self, dialect: Dialect) -> tuple[Migration, ...]:
        """Its migrations on ``dialect``, ordered by version; versions are 1, 2, 3…."""
        return _migrations(self, dialect)

    def schema(self, dialect: Dialect) -> str | None:
        """Its current schema as one script for a fresh database, if it keeps one."""
        node = self.root.joinpath(dialect).joinpath("schema.sql")
        return node.read_text(encoding="utf-8") if node.is_file() else None

    def where(self, dialect: Dialect) -> str:
        """Where its files are, for messages."""
        return f"{self.root.joinpath(dialect)}"


@functools.cache
def _queries(component: SqlComponent, dialect: Dialect) -> dict[str, Query]:
    folder = component.root.joinpath(dialect).joinpath("queries")
    merged: dict[str, Query] = {}
    if not folder.is_dir():
        return merged
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, query in parse_queries(entry.read_text(encoding="utf-8")).items():
            if name in merged:
                msg = f"query {name!r} is defined twice in {component.where(dialect)}/queries/"
                raise ValueError(msg)
            merged[name] = query
    return merged


@functools.cache
def _migrations(component: SqlComponent, dialect: Dialect) -> tuple[Migration, ...]:
    folder = component.root.joinpath(dialect).joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir() if folder.is_dir() else ():
        match = _MIGRATION.match(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                msg = f"migration file {entry.name!r} must be named NNNN_slug.sql"
                raise ValueError(msg)
            continue
        found.append(
            Migration(version=int(match[1]), name=match[2], sql=entry.read_text(encoding="utf-8"))
        )
    found.sort(key=lambda migration: migration.version)
    expected = list(range(1, len(found) + 1))
    if [m.version for m in found] != expected:
        msg = (
            f"{component.name} migrations on {dialect} must be numbered {expected}, "
            f"found {[m.version for m in found]}"
        )
        raise ValueError(msg)
    return tuple(found)


ENGINE: Final = SqlComponent.bundled("engine")
"""The engine's own tables: sagas, audit, jobs, reconciliation, inbox."""


def merged_queries(dialect: Dialect, components: tuple[SqlComponent, ...]) -> dict[str, Query]:
    """The named queries of several components; a name two of them define is an error."""
    merged: dict[str, Query] = {}
    owner: dict[str, str] = {}
    for component in components:
        for name, query in component.queries(dialect).items():
            if name in merged:
                msg = (
                    f"query {name!r} is defined by both the {owner[name]!r} and the "
                    f"{component.name!r} SQL components; prefix an application's queries"
                )
                raise ValueError(msg)
            merged[name] = query
            owner[name] = component.name
    return merged


def queries(dialect: Dialect) -> dict[str, Query]:
    """The engine's named queries on ``dialect``."""
    return ENGINE.queries(dialect)


def migrations(dialect: Dialect) -> tuple[Migration, ...]:
    """The engine's migrations on ``dialect``."""
    return ENGINE.migrations(dialect)


@functools.cache
def schema(dialect: Dialect) -> str:
    """The engine's current schema of ``dialect`` as one script, for a fresh database."""
    return _read(dialect, "engine", "schema.sql")


@functools.cache
def tracking_table(dialect: Dialect) -> str:
    """The script creating the tables that record applied migrations."""
    return _read(dialect, "engine", "migrations_table.sql")


def split_statements(script: str) -> list[str]:
    """
    Split a SQL script into statements.

    Understands ``--`` and ``/* */`` comments, quoted strings and identifiers,
    PostgreSQL dollar quoting and SQLite trigger bodies (``BEGIN … END``, with
    ``CASE … END`` inside), which is all the engine's own scripts use.
    """
    statements: list[str] = []
    current: list[str] = []
    depth = 0
    i = 0
    n = len(script)
    while i < n:
        char = script[i]
        end = _skip_token(script, i)
        if end > i + 1 or char in "'\"":
            current.append(script[i:end])
            i = end
            continue
        if char.isalpha() or char == "_":
            j = i
            while j < n and (script[j].isalnum() or script[j] == "_"):
                j += 1
            word = script[i:j].upper()
            if _is_trigger("".join(current)):
                if word in ("BEGIN", "CASE"):
                    depth += 1
                elif word == "END":
                    depth -= 1
            current.append(script[i:j])
            i = j
            continue
        if char == ";" and depth == 0:
            statement = "".join(current).strip()
            if _strip_comments_and_strings(statement).strip():
                statements.append(statement)
            current = []
        else:
            current.append(char)
        i += 1
    tail = "".join(current).strip()
    if _strip_comments_and_strings(tail).strip():
        statements.append(tail)
    return statements


_TRIGGER = re.compile(r"^\s*CREATE\s+(TEMP\s+|TEMPORARY\s+)?TRIGGER\b", re.IGNORECASE)


def _is_trigger(text: str) -> bool:
    return bool(_TRIGGER.match(_strip_comments_and_strings(text)))


def _skip_token(script: str, i: int) -> int:
    """End of the comment, string or dollar-quoted body starting at ``i`` (``i + 1`` if none)."""
    if script.startswith("--", i):
        newline = script.find("\n", i)
        return len(script) if newline < 0 else newline
    if script.startswith("/*", i):
        close = script.find("*/", i + 2)
        return len(script) if close < 0 else close + 2
    if script[i] in "'\"":
        quote = script[i]
        j = i + 1
        while j < len(script):
            if script[j] == quote:
                if j + 1 < len(script) and script[j + 1] == quote:
                    j += 2
                    continue
                return j + 1
            j += 1
        return len(script)
    dollar = _DOLLAR.match(script, i) if script[i] == "$" else None
    if dollar:
        tag = dollar.group(0)
        close = script.find(tag, i + len(tag))
        return len(script) if close < 0 else close + len(tag)
    return i + 1


def _strip_comments_and_strings(sql: str) -> str:
    """``sql`` with each comment, string, quoted identifier and dollar-quoted body as a space."""
    return _OPAQUE.sub(" ", sql)


_DOLLAR: Final = re.compile(r"\$([A-Za-z_]*)\$")
# What _skip_token skips, in one pass: -- comments (to the line's end), /* */
# comments, 'strings' and "identifiers" (doubled quotes inside), $tag$ bodies.
_OPAQUE: Final = re.compile(
    r"--[^\n]*"
    r"|/\*.*?(?:\*/|\Z)"
    r"|'(?:[^']|'')*(?:'|\Z)"
    r"|\"(?:[^\"]|\"\")*(?:\"|\Z)"
    r"|\$([A-Za-z_]*)\$.*?(?:\$\1\$|\Z)",
    re.DOTALL,
)
