"""sql.extract: the SQL of a chat model's reply."""

import pytest

from rewardsql_jax.sql.extract import extract_sql


@pytest.mark.parametrize(
    "reply, sql",
    [
        (
            "Sure:\n```sql\nSELECT name FROM singer WHERE age > 30;\n```\nIt selects ...",
            "SELECT name FROM singer WHERE age > 30",
        ),
        ("```SQLite\nSELECT count(*) FROM t\n```", "SELECT count(*) FROM t"),
        ("With a join:\n```\nSELECT a FROM t JOIN u ON t.id = u.id\n```", "SELECT a FROM t JOIN u ON t.id = u.id"),
        ("To select the names, run\nSELECT name FROM singer\nThis returns every name.", "SELECT name FROM singer"),
        (
            "WITH a AS (\n  SELECT x FROM t\n),\n\nb AS (SELECT x FROM a)\n\nSELECT count(*) FROM b\n\nDone.",
            "WITH a AS (\n  SELECT x FROM t\n),\n\nb AS (SELECT x FROM a)\n\nSELECT count(*) FROM b",
        ),
        ("SELECT name FROM t WHERE x = 'a;b'; -- and more", "SELECT name FROM t WHERE x = 'a;b'"),
        ("select name from singer", "select name from singer"),
        ("I cannot answer that.", ""),
        ("", ""),
    ],
)
def test_extract_sql(reply, sql):
    assert extract_sql(reply) == sql


def test_prose_with_the_word_with_is_not_a_query():
    assert extract_sql("Start with the table singer, then:\nSELECT * FROM singer") == "SELECT * FROM singer"
