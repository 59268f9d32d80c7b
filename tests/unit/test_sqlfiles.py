"""The SQL files: parsing, splitting, and parity between dialects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from saga.core.store.sqlfiles import (
    DIALECTS,
    ENGINE,
    SqlComponent,
    merged_queries,
    migrations,
    parse_queries,
    queries,
    schema,
    split_statements,
)


class TestParseQueries:
    def test_named_blocks_with_descriptions(self):
        """Each '-- name:' block yields a query with its description and statement."""
        parsed = parse_queries(
            "-- file comment\n\n-- name: one\n-- First.\nSELECT 1;\n\n-- name: two\nSELECT 2;\n"
        )
        assert ["one", "two"] == list(parsed)
        assert ("First.", "SELECT 1") == (parsed["one"].description, parsed["one"].sql)

    def test_duplicate_name_is_refused(self):
        """A name defined twice is an error, not a silent override."""
        with pytest.raises(ValueError, match="defined twice"):
            parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")

    def test_empty_block_is_refused(self):
        """A header without a statement is an error."""
        with pytest.raises(ValueError, match="no statement"):
            parse_queries("-- name: a\n-- nothing here\n")

    def test_two_statements_in_one_block_are_refused(self):
        """One block, one statement: a second one would run unnoticed."""
        with pytest.raises(ValueError, match="more than one statement"):
            parse_queries("-- name: a\nSELECT 1; DELETE FROM x;\n")

    def test_a_block_may_declare_several_statements(self):
        """``-- statements: N``: a dialect without a data-modifying WITH runs N in turn."""
        (query,) = parse_queries(
            "-- name: a\n-- statements: 2\n-- Both.\nSELECT 1; SELECT 2;\n"
        ).values()
        assert ("Both.", ["SELECT 1", "SELECT 2"]) == (query.description, query.statements())

    def test_a_declared_count_that_does_not_match_is_refused(self):
        """Three statements where two are declared: an error, not a silent extra statement."""
        with pytest.raises(ValueError, match="declares 2 statements and holds 3"):
            parse_queries("-- name: a\n-- statements: 2\nSELECT 1; SELECT 2; SELECT 3;\n")

    def test_sql_before_first_header_is_refused(self):
        """Stray SQL outside any block is an error."""
        with pytest.raises(ValueError, match="before the first"):
            parse_queries("SELECT 1;\n-- name: a\nSELECT 2;\n")


class TestSplitStatements:
    def test_semicolons_in_strings_and_comments_do_not_split(self):
        """Quoted or commented semicolons stay inside their statement."""
        script = "SELECT ';'; -- a ; comment\nSELECT \"a;b\" /* ; */;"
        assert ["SELECT ';'", '-- a ; comment\nSELECT "a;b" /* ; */'] == split_statements(script)

    def test_dollar_quoted_bodies_stay_whole(self):
        """A plpgsql body between $$ is one statement."""
        script = (
            "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;"
            "SELECT 1;"
        )
        assert 2 == len(split_statements(script))

    def test_sqlite_trigger_bodies_stay_whole(self):
        """BEGIN … END of a trigger, with CASE … END inside, is one statement."""
        script = (
            "CREATE TRIGGER t BEFORE UPDATE ON x BEGIN "
            "SELECT CASE WHEN 1 THEN RAISE(ABORT, 'no') END; SELECT 2; END;\nSELECT 3;"
        )
        statements = split_statements(script)
        assert 2 == len(statements)
        assert statements[0].endswith("END")


BUNDLED = [SqlComponent.bundled(name) for name in ("engine", "purchase", "sandbox", "testing")]
by_name = pytest.mark.parametrize("component", BUNDLED, ids=lambda c: c.name)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_engine_files_parse(dialect):
    """The engine's queries, schema and migrations load on every dialect."""
    assert queries(dialect)
    assert split_statements(schema(dialect))
    assert migrations(dialect)


@by_name
def test_both_dialects_define_the_same_queries(component):
    """PostgreSQL and SQLite answer the same named queries, component by component."""
    assert component.queries("postgres")
    assert set(component.queries("postgres")) == set(component.queries("sqlite"))


@by_name
def test_both_dialects_bind_the_same_parameters(component):
    """Each named query takes the same parameters on both dialects."""
    for name, query in component.queries("postgres").items():
        pg = set(re.findall(r"(?<!:):([a-z_]+)", query.sql))
        lite = set(re.findall(r"(?<!:):([a-z_]+)", component.queries("sqlite")[name].sql))
        assert pg == lite, name


@by_name
def test_both_dialects_have_the_same_migrations(component):
    """Every migration exists for both dialects, with the same number and name."""
    names = {d: [(m.version, m.name) for m in component.migrations(d)] for d in DIALECTS}
    assert names["postgres"] == names["sqlite"]


@by_name
def test_every_state_change_is_a_compare_and_set(component):
    """UPDATEs of a saga's state always say which state and version they expect."""
    for dialect in DIALECTS:
        for query in component.queries(dialect).values():
            if re.search(r"UPDATE\s+sagas\b", query.sql) and "SET state" in query.sql:
                assert "AND state = :from_state AND version = :version" in query.sql, query.name


@by_name
def test_queries_never_format_values(component):
    """Values are bound: no Python format markers in SQL text."""
    for dialect in DIALECTS:
        for query in component.queries(dialect).values():
            assert not re.search(r"\{[a-z_]*\}|%s|%\(", query.sql), query.name


def test_the_engine_and_its_applications_share_no_query_name():
    """Every component's queries run in one namespace: no name is defined twice."""
    for dialect in DIALECTS:
        assert merged_queries(dialect, tuple(BUNDLED))


def test_a_query_name_two_components_define_is_refused(tmp_path):
    """An application may not shadow one of the engine's queries."""
    folder = tmp_path / "sqlite" / "queries"
    folder.mkdir(parents=True)
    (folder / "mine.sql").write_text("-- name: db_now\nSELECT 1;\n")
    mine = SqlComponent(name="mine", root=tmp_path)
    with pytest.raises(ValueError, match="'db_now' is defined by both the 'engine' and the 'mine'"):
        merged_queries("sqlite", (ENGINE, mine))


def test_migrations_must_be_numbered_without_gaps(tmp_path):
    """A missing number is refused rather than skipped."""
    folder = tmp_path / "sqlite" / "migrations"
    folder.mkdir(parents=True)
    (folder / "0001_first.sql").write_text("CREATE TABLE a (x int);")
    (folder / "0003_third.sql").write_text("CREATE TABLE b (x int);")
    with pytest.raises(ValueError, match=r"numbered \[1, 2\], found \[1, 3\]"):
        SqlComponent(name="gappy", root=tmp_path).migrations("sqlite")


def test_a_component_name_is_snake_case(tmp_path):
    """The name is recorded beside each migration: it must be a plain identifier."""
    with pytest.raises(ValueError, match="snake_case"):
        SqlComponent(name="My App", root=tmp_path)


SAGA = Path(__file__).resolve().parents[2] / "saga"


@pytest.mark.parametrize("name", ["engine", "purchase", "sandbox"])
def test_every_production_query_is_run_by_production_code(name):
    """A query only tests (or nobody) run is no part of the shipped SQL: tests keep their own."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in SAGA.rglob("*.py"))
    # Names built at run time: f"prune_{target}" runs prune_jobs, prune_inbox, ...
    prefixes = set(re.findall(r'f"([a-z_]+)\{', source))
    unused = [
        query
        for dialect in DIALECTS
        for query in SqlComponent.bundled(name).queries(dialect)
        if f'"{query}"' not in source and not any(query.startswith(p) for p in prefixes)
    ]
    assert [] == sorted(set(unused))


def test_the_test_clocks_queries_are_not_the_engines():
    """saga.testing's guard switches live apart: no engine transaction can run them by name."""
    testing = SqlComponent.bundled("testing")
    for dialect in DIALECTS:
        assert {"suspend_audit_guard", "restore_audit_guard"} == set(testing.queries(dialect))
        assert not set(testing.queries(dialect)) & set(ENGINE.queries(dialect))
        assert not [q for q in ENGINE.queries(dialect) if "testing" in q]
