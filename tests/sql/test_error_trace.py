"""SQLite error messages (EXPO-SQL Table 14) -> erroneous clauses with backward tracing (3.2.3, A.3)."""

import sqlite3

import pytest

from rewardsql_jax.sql import execute
from rewardsql_jax.sql.clauses import split_sql
from rewardsql_jax.sql.error_trace import parse_error, trace_error


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("errdb") / "shop.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, amount REAL, name TEXT);
        CREATE TABLE users(id INTEGER PRIMARY KEY, handle TEXT);
        INSERT INTO customer VALUES (1, 'ann', 'paris'), (2, 'bob', 'rome');
        INSERT INTO orders VALUES (1, 1, 10.0, 'o1'), (2, 1, 5.0, 'o2'), (3, 2, 7.5, 'o3');
        INSERT INTO users VALUES (1, 'a'), (2, 'b');
    """)
    con.commit()
    con.close()
    return path


def flagged(db, sql, expected_pattern):
    """Run ``sql`` on real SQLite, check the message's pattern, return the flagged (kind, text) pairs."""
    res = execute(db, sql)
    assert not res.ok, sql
    info = parse_error(res.error)
    assert info.name == expected_pattern, (res.error, info)
    split = split_sql(sql)
    return sorted(
        (split.spans[i].kind, sql[split.spans[i].start : split.spans[i].end])
        for i in trace_error(split, res.error, timed_out=res.timed_out)
    )


def test_wrong_join_dropped_order_by_column_flags_the_join(db):
    # Figure 2 of the paper: the error is reported in ORDER BY, the root cause is the JOIN.
    sql = "SELECT T1.name FROM customer AS T1 JOIN users AS us ON T1.id = us.id ORDER BY us.amount DESC"
    assert flagged(db, sql, "no_such_column") == [
        ("JOIN", "JOIN users AS us ON T1.id = us.id"),
        ("ORDER BY", "ORDER BY us.amount DESC"),
    ]


def test_no_such_column_unqualified_flags_reference_and_retrieval(db):
    sql = "SELECT name FROM customer WHERE amount > 5"
    assert flagged(db, sql, "no_such_column") == [("FROM", "FROM customer"), ("WHERE", "WHERE amount > 5")]


def test_no_such_table(db):
    sql = "SELECT T1.name FROM customer AS T1 JOIN order_items AS T2 ON T1.id = T2.cid WHERE T1.id = 1"
    assert flagged(db, sql, "no_such_table") == [("JOIN", "JOIN order_items AS T2 ON T1.id = T2.cid")]


def test_ambiguous_column(db):
    sql = "SELECT name FROM customer AS T1 JOIN orders AS T2 ON T1.id = T2.customer_id WHERE T2.amount > 1"
    assert flagged(db, sql, "ambiguous_column") == [
        ("JOIN", "JOIN orders AS T2 ON T1.id = T2.customer_id"),
        ("SELECT", "SELECT name"),
    ]


def test_no_such_function(db):
    sql = "SELECT median(amount) FROM orders WHERE amount > 1"
    assert flagged(db, sql, "no_such_function") == [("SELECT", "SELECT median(amount)")]


def test_wrong_number_of_arguments(db):
    sql = "SELECT name FROM customer WHERE substr(name) = 'a'"
    assert flagged(db, sql, "wrong_arguments") == [("WHERE", "WHERE substr(name) = 'a'")]


def test_misuse_of_aggregate_function_in_where(db):
    sql = "SELECT customer_id FROM orders WHERE max(amount) > 5 GROUP BY customer_id ORDER BY max(amount)"
    assert flagged(db, sql, "misuse_aggregate") == [("WHERE", "WHERE max(amount) > 5")]


def test_misuse_of_aggregate_through_alias(db):
    sql = "SELECT count(*) AS n FROM orders WHERE n > 1"
    assert flagged(db, sql, "misuse_aggregate") == [("WHERE", "WHERE n > 1")]


def test_aggregate_in_group_by(db):
    sql = "SELECT customer_id FROM orders GROUP BY count(*)"
    assert flagged(db, sql, "aggregate_in_group_by") == [("GROUP BY", "GROUP BY count(*)")]


def test_misuse_of_window_function(db):
    sql = "SELECT name FROM orders WHERE row_number() OVER () = 1"
    assert flagged(db, sql, "misuse_window") == [("WHERE", "WHERE row_number() OVER () = 1")]


def test_datatype_mismatch_in_limit(db):
    sql = "SELECT name FROM customer WHERE id > 0 LIMIT 'x'"
    assert flagged(db, sql, "datatype_mismatch") == [("LIMIT", "LIMIT 'x'")]


def test_syntax_error_near_token(db):
    sql = "SELECT name FROM customer WHERE city = 'paris' ORDER name"
    assert flagged(db, sql, "near") == [("WHERE", "WHERE city = 'paris' ORDER name")]


def test_syntax_error_before_a_clause_keyword_flags_the_unfinished_clause(db):
    sql = "SELECT name, FROM customer WHERE id = 1"
    assert flagged(db, sql, "near") == [("SELECT", "SELECT name,")]


def test_unrecognized_token(db):
    sql = "SELECT name FROM customer WHERE id = $"
    assert flagged(db, sql, "unrecognized_token") == [("WHERE", "WHERE id = $")]


def test_incomplete_input_flags_the_last_clause(db):
    sql = "SELECT name FROM customer WHERE"
    assert flagged(db, sql, "incomplete_input") == [("WHERE", "WHERE")]


def test_group_by_term_out_of_range(db):
    assert flagged(db, "SELECT name FROM customer GROUP BY 3", "group_by_range") == [("GROUP BY", "GROUP BY 3")]


def test_order_by_term_out_of_range(db):
    assert flagged(db, "SELECT name FROM customer ORDER BY 2", "order_by_term") == [("ORDER BY", "ORDER BY 2")]


def test_compound_column_mismatch_flags_the_selects(db):
    sql = "SELECT name FROM customer UNION SELECT name, amount FROM orders"
    assert flagged(db, sql, "compound_columns") == [("SELECT", "SELECT name"), ("SELECT", "SELECT name, amount")]


def test_having_without_aggregate(db):
    sql = "SELECT name FROM customer HAVING id > 1"
    assert flagged(db, sql, "having") == [("HAVING", "HAVING id > 1")]


def test_order_by_before_union(db):
    sql = "SELECT name FROM customer ORDER BY name UNION SELECT name FROM orders"
    assert flagged(db, sql, "misplaced_order_limit") == [("ORDER BY", "ORDER BY name")]


def test_subselect_with_too_many_columns(db):
    sql = "SELECT name FROM customer WHERE id IN (SELECT customer_id, amount FROM orders)"
    assert flagged(db, sql, "subquery_columns") == [("WHERE", "WHERE id IN (SELECT customer_id, amount FROM orders)")]


def test_timeout_flags_data_retrieval_clauses():
    sql = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r WHERE n > 0"
    split = split_sql(sql)
    got = {(split.spans[i].kind, split.spans[i].cte) for i in trace_error(split, "interrupted", timed_out=True)}
    assert got == {("FROM", None), ("FROM", "r")}


def test_unknown_message_flags_every_clause():
    split = split_sql("SELECT a FROM t WHERE b = 1")
    assert trace_error(split, "disk I/O error") == frozenset(range(3))
    assert parse_error("disk I/O error").category == "other"


@pytest.mark.parametrize(
    "msg,category,name,element",
    [
        ("no such column: T2.x", "schema", "no_such_column", "T2.x"),
        ("no such table: main.foo", "schema", "no_such_table", "main.foo"),
        ("misuse of aggregate function count()", "logical", "misuse_aggregate", "count"),
        ("misuse of aggregate: count()", "logical", "misuse_aggregate", "count"),
        ("misuse of aliased identifier foo", "logical", "misuse_alias", "foo"),
        ("NOT NULL constraint failed: t.a", "data", "constraint", None),
        ("UNIQUE constraint failed: t.a", "data", "constraint", None),
        ('near "FROM": syntax error', "syntax", "near", "FROM"),
    ],
)
def test_parse_error_patterns(msg, category, name, element):
    info = parse_error(msg)
    assert (info.category, info.name, info.element) == (category, name, element)
