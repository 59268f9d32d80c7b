"""The SQL files: parsing, splitting, and parity between dialects."""

from __future__ import annotations

import re

import pytest

from saga.core.sqlfiles import (
    DIALECTS,
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


@pytest.mark.parametrize("dialect", DIALECTS)
def test_files_parse(dialect):
    """Every dialect's queries, schema and migrations load."""
    assert queries(dialect)
    assert split_statements(schema(dialect))
    assert migrations(dialect)


def test_both_dialects_define_the_same_queries():
    """PostgreSQL and SQLite answer the same named queries."""
    assert set(queries("postgres")) == set(queries("sqlite"))


def test_both_dialects_bind_the_same_parameters():
    """Each named query takes the same parameters on both dialects."""
    for name, query in queries("postgres").items():
        pg = set(re.findall(r"(?<!:):([a-z_]+)", query.sql))
        lite = set(re.findall(r"(?<!:):([a-z_]+)", queries("sqlite")[name].sql))
        assert pg == lite, name


def test_both_dialects_have_the_same_migrations():
    """Every migration exists for both dialects, with the same number and name."""
    names = {d: [(m.version, m.name) for m in migrations(d)] for d in DIALECTS}
    assert names["postgres"] == names["sqlite"]


def test_every_state_change_is_a_compare_and_set():
    """UPDATEs of a saga's state always say which state and version they expect."""
    for dialect in DIALECTS:
        for query in queries(dialect).values():
            if re.search(r"UPDATE\s+sagas\b", query.sql) and "SET state" in query.sql:
                assert "AND state = :from_state AND version = :version" in query.sql, query.name


def test_queries_never_format_values():
    """Values are bound: no Python format markers in SQL text."""
    for dialect in DIALECTS:
        for query in queries(dialect).values():
            assert not re.search(r"\{[a-z_]*\}|%s|%\(", query.sql), query.name


def test_sandbox_queries_match_across_dialects():
    """The sandbox provider answers the same named queries on both dialects."""
    assert set(queries("postgres", "sandbox")) == set(queries("sqlite", "sandbox"))
