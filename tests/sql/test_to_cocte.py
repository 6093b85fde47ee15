"""to_cocte: structure of the rewrite (one CTE per logical operation, Reward-SQL Figure 7), fallback, real
steps (cocte_checks.step_issues) and execution equivalence on real Spider gold SQL."""

import functools
import json
import random
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
import sqlglot

from rewardsql_jax.sql.cocte import prefix_sql, split_cocte
from rewardsql_jax.sql.cocte_checks import needs_steps, step_issues, table_columns
from rewardsql_jax.sql.execute import execute
from rewardsql_jax.sql.to_cocte import convert_to_cocte, to_cocte

DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPIDER_DIR = DATA_DIR / "spider"


def same_result(db, gold_sql, cocte_sql):
    gold, got = execute(db, gold_sql), execute(db, cocte_sql)
    assert gold.ok, gold.error
    if not got.ok or len(gold.columns) != len(got.columns):
        return False
    if sqlglot.parse_one(gold_sql, read="sqlite").args.get("order") is not None:
        return list(gold.rows) == list(got.rows)
    return Counter(gold.rows) == Counter(got.rows)


def real_steps(db, sql, conv):
    """The conversion is structured, execute-equal, and its steps are real (referenced, not rename-only,
    every prefix executes); returns the parsed CoCTE."""
    assert not conv.fallback and conv.reason is None
    assert same_result(db, sql, conv.sql), conv.sql
    assert step_issues(conv.sql, db) == [], conv.sql
    c = split_cocte(conv.sql)
    assert conv.steps == len(c.steps) >= 2
    return c


def test_join_filter_group_order_become_steps(tiny_db):
    sql = (
        "SELECT T1.name, count(*) FROM person AS T1 JOIN pet AS T2 ON T1.id = T2.owner_id "
        "WHERE T2.kind = 'cat' GROUP BY T1.id ORDER BY count(*) DESC, T1.name LIMIT 2"
    )
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    assert [s.name for s in c.steps] == ["pet_filtered", "person_joined", "person_grouped"]
    filt, join, group = (s.body for s in c.steps)
    assert "WHERE" in filt and "FROM pet AS T2" in filt and "JOIN" not in filt  # the filter is pushed to pet
    assert "JOIN pet_filtered AS T2" in join and "WHERE" not in join and "GROUP BY" not in join
    assert "GROUP BY" in group and "person_joined" in group
    assert c.final.startswith("SELECT") and "ORDER BY" in c.final and "person_grouped" in c.final
    assert conv.sql.count("\n\n") == 3  # Reward-SQL format: steps and final separated by blank lines
    for k in (1, 2, 3):
        assert execute(tiny_db, prefix_sql(conv.sql, k)).ok


def test_duplicate_column_names_across_joins_get_distinct_aliases(tiny_db):
    sql = "SELECT T1.id, T2.id, T2.kind FROM person AS T1 JOIN pet AS T2 ON T1.id = T2.owner_id ORDER BY T2.id"
    out = to_cocte(sql)
    body = split_cocte(out).steps[-1].body
    assert "T1.id AS id" in body and "T2.id AS T2_id" in body
    assert same_result(tiny_db, sql, out)
    assert execute(tiny_db, out).columns == ("id", "id", "kind")  # output names are preserved


def test_where_subqueries_are_lifted_into_steps(tiny_db):
    sql = (
        "SELECT name FROM person WHERE id NOT IN (SELECT owner_id FROM pet WHERE kind = 'dog') "
        "AND age > (SELECT avg(age) FROM person)"
    )
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    names = [s.name for s in c.steps]
    assert names == ["pet_filtered", "person_aggregated", "person_filtered", "person_filtered_2"]  # textual order
    first, second = c.steps[2].body, c.steps[3].body  # one filter step per AND-ed condition
    assert "FROM pet_filtered" in first and "person_aggregated" not in first
    assert "FROM person_aggregated" in second and "FROM person_filtered" in second
    assert all("AVG" not in s.body.upper() for s in c.steps[2:])


def test_uncorrelated_subqueries_in_select_and_order_by_are_lifted(tiny_db):
    sql = (
        "SELECT name, (SELECT count(*) FROM pet) AS n FROM person WHERE age > 20 "
        "ORDER BY (SELECT max(age) FROM person) - age"
    )
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    assert [s.name for s in c.steps] == ["pet_aggregated", "person_aggregated", "person_filtered"]
    assert "FROM pet_aggregated" in c.final and "FROM person_aggregated" in c.final


def test_a_scalar_subquery_in_select_is_lifted_once(tiny_db):
    sql = "SELECT (SELECT max(age) - min(age) FROM person), name FROM person WHERE city = 'Oslo'"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["person_aggregated", "person_filtered"]


def test_set_operations_convert_each_side(tiny_db):
    sql = (
        "SELECT name FROM person WHERE city = 'Oslo' UNION SELECT T1.name FROM person AS T1 JOIN pet AS T2 "
        "ON T1.id = T2.owner_id WHERE T2.kind = 'dog' EXCEPT SELECT name FROM person WHERE age > 40 "
        "ORDER BY name"
    )
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    assert len(c.steps) == 4 and "UNION" in c.final and "EXCEPT" in c.final and "ORDER BY" in c.final
    assert all("UNION" not in s.body and "EXCEPT" not in s.body for s in c.steps)


def test_derived_table_and_alias_references(tiny_db):
    sql = (
        "SELECT x.city, count(*) AS n FROM (SELECT city FROM person WHERE age IS NOT NULL) AS x "
        "GROUP BY x.city HAVING n >= 1 ORDER BY n DESC, 1"
    )
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    assert [s.name for s in c.steps] == ["person_filtered", "person_filtered_grouped", "person_filtered_having"]
    assert "FROM person" in c.steps[0].body and f"FROM {c.steps[0].name} AS x" in c.steps[1].body
    assert execute(tiny_db, conv.sql).columns == ("city", "n")


# --- one hand-written case per logical operation (Reward-SQL Figure 7: one CTE per operation) -----------


def test_filter_each_condition_is_a_step(tiny_db):
    sql = "SELECT name FROM person WHERE city = 'Oslo' AND age >= 30 AND score IS NOT NULL"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["person_filtered", "person_filtered_2", "person_filtered_3"]
    assert [s.body.count("WHERE") for s in c.steps] == [1, 1, 1]
    assert "FROM person\n" in c.steps[0].body + "\n" and "FROM person_filtered_2" in c.steps[2].body


def test_single_filter_gets_a_column_selection_step(tiny_db):
    sql = "SELECT name FROM person WHERE city = 'Oslo'"
    conv = convert_to_cocte(sql)
    c = real_steps(tiny_db, sql, conv)
    assert [s.name for s in c.steps] == ["person_columns", "person_filtered"]
    assert "WHERE" not in c.steps[0].body and "city" in c.steps[0].body and "age" not in c.steps[0].body
    # with the schema known, a column selection that would copy the whole table is not made
    whole = "SELECT id, name, age, city, score FROM person WHERE city = 'Oslo'"
    conv = convert_to_cocte(whole, schema=table_columns(tiny_db))
    assert conv.steps == 1 and conv.single_step == "whole_table_used" and not conv.fallback
    assert same_result(tiny_db, whole, conv.sql)


def test_join_conditions_are_pushed_to_their_tables(tiny_db):
    sql = (
        "SELECT T1.name, T2.kind FROM person AS T1 JOIN pet AS T2 ON T1.id = T2.owner_id "
        "WHERE T1.city = 'Oslo' AND T2.weight > 1 AND T1.age + T2.weight > 31"
    )
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["person_filtered", "pet_filtered", "person_joined"]
    assert "T1.city = 'Oslo'" in c.steps[0].body and "T2.weight > 1" in c.steps[1].body
    assert "T1.age + T2.weight > 31" in c.steps[2].body  # a condition over both tables stays with the join


def test_left_join_keeps_conditions_on_the_nullable_side(tiny_db):
    sql = (
        "SELECT T1.name, T2.kind FROM person AS T1 LEFT JOIN pet AS T2 ON T1.id = T2.owner_id "
        "WHERE T2.kind IS NULL OR T2.kind = 'cat'"
    )
    conv = convert_to_cocte(sql)
    assert "FROM pet AS T2\n  WHERE" not in conv.sql  # pushing it down would keep unmatched persons
    c = real_steps(tiny_db, sql, conv)
    assert [s.name for s in c.steps] == ["person_joined", "person_filtered"]  # join, then its filter
    sql = "SELECT T1.name FROM person AS T1 LEFT JOIN pet AS T2 ON T1.id = T2.owner_id WHERE T1.age > 26"
    assert "T1.age > 26" in real_steps(tiny_db, sql, convert_to_cocte(sql)).steps[0].body  # preserved side


def test_aggregate_and_having_are_steps(tiny_db):
    sql = "SELECT city, avg(age) FROM person GROUP BY city HAVING count(*) > 1 AND max(score) >= 1.5"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["person_grouped", "person_having"]
    assert "GROUP BY" in c.steps[0].body and "HAVING" not in c.steps[0].body
    assert "COUNT(*)" in c.steps[0].body and "WHERE" in c.steps[1].body and "COUNT" not in c.steps[1].body
    sql = "SELECT kind, count(*) FROM pet GROUP BY kind"  # a plain aggregate: column selection, then group
    assert [s.name for s in real_steps(tiny_db, sql, convert_to_cocte(sql)).steps] == ["pet_columns", "pet_grouped"]


def test_having_with_order_and_limit_keeps_the_tied_row(tiny_db):
    # owners 1 and 3 both have 2 pets: the sort under LIMIT stays in the aggregation step with its HAVING
    sql = "SELECT owner_id FROM pet GROUP BY owner_id HAVING sum(weight) > 1 ORDER BY count(*) DESC LIMIT 1"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["pet_columns", "pet_grouped"]
    assert "HAVING" in c.steps[1].body and "LIMIT 1" in c.steps[1].body
    sql = "SELECT owner_id FROM pet GROUP BY owner_id HAVING sum(weight) > 1 ORDER BY count(*) DESC, owner_id"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))  # without LIMIT the HAVING is a step of its own
    assert [s.name for s in c.steps] == ["pet_grouped", "pet_having"]


def test_subquery_in_from_and_where_are_steps(tiny_db):
    sql = (
        "SELECT count(*) FROM (SELECT owner_id FROM pet WHERE kind = 'cat') AS c "
        "WHERE c.owner_id IN (SELECT id FROM person WHERE age > 26)"
    )
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == [
        "pet_filtered",
        "person_filtered",
        "pet_filtered_filtered",
        "pet_filtered_aggregated",
    ]


def test_ordering_and_limit_is_a_top_k_step(tiny_db):
    sql = "SELECT name, age FROM person WHERE city = 'Oslo' OR age > 40 ORDER BY age DESC, name LIMIT 2"
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert [s.name for s in c.steps] == ["person_filtered", "person_top"]
    assert "LIMIT 2" in c.steps[1].body and "LIMIT" not in c.final and "ORDER BY" in c.final
    sql = "SELECT name FROM person ORDER BY score DESC LIMIT 1"  # no filter: columns, then top-k
    assert [s.name for s in real_steps(tiny_db, sql, convert_to_cocte(sql)).steps] == ["person_columns", "person_top"]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM person WHERE city IS NOT NULL ORDER BY city LIMIT 1",  # Ann and Cid tie on Oslo
        "SELECT T1.name FROM person AS T1 JOIN pet AS T2 ON T1.id = T2.owner_id WHERE T2.kind = 'cat' "
        "ORDER BY T2.weight DESC LIMIT 1",  # two cats of 4.0 kg
        "SELECT name FROM person ORDER BY age DESC LIMIT 1 OFFSET 1",
    ],
)
def test_top_k_step_keeps_the_tied_rows(tiny_db, sql):
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert c.steps[-1].name.endswith("_top") and "LIMIT 1" in c.steps[-1].body


def test_correlated_subquery_stays_in_the_first_filter(tiny_db):
    sql = (
        "SELECT name FROM person AS p WHERE age > 20 AND score >= "
        "(SELECT avg(score) FROM person AS q WHERE q.city = p.city)"
    )
    c = real_steps(tiny_db, sql, convert_to_cocte(sql))
    assert "p.city" in c.steps[0].body and "FROM person AS p" in c.steps[0].body


def test_aggregate_ties_keep_the_same_row_under_limit(tiny_db):
    # person 1 and 3 both own 2 pets: LIMIT 1 must keep the same tied row as the original query
    sql = "SELECT owner_id FROM pet GROUP BY owner_id ORDER BY count(*) DESC LIMIT 1"
    assert same_result(tiny_db, sql, to_cocte(sql))


@pytest.mark.parametrize(
    "sql,reason",
    [
        ("SELECT 1 + 1", "without FROM"),
        ("SELECT name, rank() OVER (ORDER BY age) FROM person", "window"),
        ("SELECT name, (SELECT count(*) FROM pet AS p WHERE p.owner_id = q.id) FROM person AS q", "correlated"),
        ("SELECT T1.*, T2.kind FROM person AS T1 JOIN pet AS T2 ON T1.id = T2.owner_id", "star"),
    ],
)
def test_fallback_is_reported_and_still_equivalent(tiny_db, sql, reason):
    conv = convert_to_cocte(sql)
    assert conv.fallback and reason in conv.reason
    c = split_cocte(conv.sql)
    assert len(c.steps) == 1 and c.final == f"SELECT * FROM {c.steps[0].name}"
    assert same_result(tiny_db, sql, conv.sql)


def test_step_names_never_shadow_tables(tmp_path):
    db = tmp_path / "s.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
        conn.execute("CREATE TABLE t_filtered (a INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
        conn.executemany("INSERT INTO t_filtered VALUES (?)", [(3,)])
    sql = "SELECT a FROM t WHERE a IN (SELECT a FROM t_filtered) OR a = 1"
    out = to_cocte(sql)
    assert "t_filtered_2" in out or "t_filtered_filtered" in out
    assert same_result(str(db), sql, out)


def test_double_quoted_string_literals_keep_working(tiny_db):
    # SQLite reads an unresolvable "double-quoted" identifier as a string literal (common in Spider gold SQL)
    sql = 'SELECT city, count(*) FROM person GROUP BY city HAVING city != "Rome" ORDER BY city'
    assert same_result(tiny_db, sql, to_cocte(sql))


def test_keyword_and_spaced_names_stay_quoted(tmp_path):
    db = tmp_path / "k.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE "order" (account_id INTEGER, "k symbol" TEXT, amount REAL)')
        conn.executemany('INSERT INTO "order" VALUES (?, ?, ?)', [(1, "a", 2.0), (1, "a", 3.0), (2, "b", 1.0)])
    sql = (
        "SELECT T2.`k symbol`, T2.total FROM (SELECT account_id, `k symbol`, SUM(amount) AS total "
        "FROM `order` GROUP BY account_id, `k symbol`) AS T2 WHERE T2.total > 1 ORDER BY T2.total DESC"
    )
    conv = convert_to_cocte(sql)
    assert not conv.fallback and '"order"' in conv.sql
    assert same_result(str(db), sql, conv.sql)
    assert execute(db, conv.sql).columns == ("k symbol", "total")


@pytest.mark.parametrize("bad", ["", "SELEC name FRM t", "SELECT 1; SELECT 2"])
def test_bad_sql_raises(bad):
    with pytest.raises(ValueError):
        to_cocte(bad)


def test_non_query_statement_is_rejected():
    with pytest.raises(ValueError, match="SELECT query"):
        to_cocte("DELETE FROM person")


@functools.cache
def _schema(db):
    return table_columns(db)


def _rate(pairs):
    """(equal rate, fallback rate, >= 2-step rate among queries with JOIN/WHERE/GROUP BY/sub-query, n) over the
    pairs whose gold query executes; converted with the database's table columns as ``schema``."""
    equal = fallback = multi = ops = n = 0
    for db, sql in pairs:
        gold = execute(db, sql)
        if not gold.ok:
            continue
        n += 1
        conv = convert_to_cocte(sql, schema=_schema(db))
        assert len(split_cocte(conv.sql).steps) == conv.steps >= 1, sql  # round-trips with at least one step
        fallback += conv.fallback
        if needs_steps(sql):
            ops += 1
            multi += conv.steps >= 2
        got = execute(db, conv.sql)
        if got.ok and len(got.columns) == len(gold.columns):
            ordered = sqlglot.parse_one(sql, read="sqlite").args.get("order") is not None
            equal += (list(got.rows) == list(gold.rows)) if ordered else Counter(got.rows) == Counter(gold.rows)
    return equal / n, fallback / n, multi / ops, n


def test_spider_dev_sample_decomposes_into_real_steps(spider_dev):
    """A seeded sample of 80 Spider dev gold queries with a JOIN, WHERE, GROUP BY or sub-query: >= 90% become
    >= 2 CTE steps (issue 15; measured on all 761: 99.5%, benchmarks/RESULTS.md), all execute-equal, and every
    step is real: referenced later, not rename-only, its prefix executes (cocte_checks.step_issues)."""
    pairs = sorted({(db, sql) for db, sql, _ in spider_dev if needs_steps(sql)})
    sample = random.Random(15).sample(pairs, 80)
    steps = Counter()
    for db, sql in sample:
        conv = convert_to_cocte(sql, schema=_schema(db))
        steps[conv.steps] += 1
        assert not conv.fallback, (sql, conv.reason)
        assert same_result(db, sql, conv.sql), (sql, conv.sql)
        assert step_issues(conv.sql, db) == [], (sql, conv.sql)
        if conv.steps < 2:
            assert conv.single_step in {"whole_table_used", "star_projection", "unqualified_join_columns"}
    assert sum(v for k, v in steps.items() if k >= 2) / len(sample) >= 0.9, steps
    assert len(steps) >= 3  # a spread of chain lengths, not one fixed shape


def test_spider_dev_gold_converts_and_executes_equal(spider_dev):
    equal, fallback, multi, n = _rate([(db, sql) for db, sql, _ in spider_dev])
    assert n >= 970
    # measured: 100% equal, 0% fallback, 99.5% of the 761 with JOIN/WHERE/GROUP BY/sub-query have >= 2 steps
    assert equal >= 0.99 and fallback <= 0.01 and multi >= 0.95


def _train_pairs():
    path = DATA_DIR / "spider_syn" / "train_spider.json"
    if not path.exists():
        pytest.skip(f"Spider train questions not found at {path}")
    out = []
    for d in json.loads(path.read_text()):
        db = SPIDER_DIR / "database" / d["db_id"] / f"{d['db_id']}.sqlite"
        if db.exists():
            out.append((str(db), d["query"]))
    return out


def test_spider_train_sample_converts_and_executes_equal():
    equal, fallback, multi, n = _rate(_train_pairs()[::7])  # deterministic ~1000-query sample
    assert n >= 950
    assert equal >= 0.99 and fallback <= 0.01 and multi >= 0.9


@pytest.mark.slow
def test_spider_train_all_converts_and_executes_equal():
    equal, _, multi, n = _rate(_train_pairs())  # measured 100% equal, 98.2% multi-step on all 6901
    assert n >= 6800 and equal >= 0.99 and multi >= 0.95


def test_bird_dev_gold_decomposes():
    """BIRD dev gold SQL (no databases shipped: conversion and step counts only, schema from dev_tables.json)."""
    bird = DATA_DIR / "bird" / "dev"
    if not (bird / "dev_gold.sql").exists():
        pytest.skip(f"BIRD dev gold SQL not found at {bird}")
    schemas = {
        t["db_id"]: {
            name: [c for ti, c in t["column_names_original"] if ti == i]
            for i, name in enumerate(t["table_names_original"])
        }
        for t in json.loads((bird / "dev_tables.json").read_text())
    }
    n = fallback = ops = multi = 0
    for line in (bird / "dev_gold.sql").read_text().splitlines():
        if not line.strip():
            continue
        sql, db_id = line.rsplit("\t", 1)
        conv = convert_to_cocte(sql, schema=schemas[db_id])
        assert len(split_cocte(conv.sql).steps) == conv.steps
        assert step_issues(conv.sql) == [], sql  # structural checks (no database to run the prefixes)
        n, fallback = n + 1, fallback + conv.fallback
        if needs_steps(sql):
            ops, multi = ops + 1, multi + (conv.steps >= 2)
    assert n == 1534 and fallback <= 10  # measured: 7 (5 window functions, 2 without FROM)
    assert multi / ops >= 0.95  # measured: 98.9% of 1488
