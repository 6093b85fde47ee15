"""Clause splitting with spans in logical order (EXPO-SQL 3.1, 3.2.2, Table 15)."""

import re
from pathlib import Path

import pytest

from rewardsql_jax.sql import Clause, split_clauses
from rewardsql_jax.sql.clauses import split_sql

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

_KEYWORD = {
    "JOIN": r"((natural|left|right|full|inner|outer|cross)\s+)*join\b",
    "GROUP BY": r"group\s+by\b",
    "ORDER BY": r"order\s+by\b",
}


def texts(sql):
    return [(c.kind, sql[c.start : c.end]) for c in split_clauses(sql)]


def test_all_clauses_in_logical_order_with_exact_text():
    sql = (
        "SELECT DISTINCT T1.name, count(*) FROM a AS T1 LEFT OUTER JOIN b ON T1.id = b.id "
        "JOIN c USING (id) WHERE x IN (SELECT y FROM d WHERE z > 1) GROUP BY T1.name "
        "HAVING count(*) > 1 ORDER BY 2 DESC LIMIT 3 OFFSET 1"
    )
    assert texts(sql) == [
        ("FROM", "FROM a AS T1"),
        ("JOIN", "LEFT OUTER JOIN b ON T1.id = b.id"),
        ("JOIN", "JOIN c USING (id)"),
        ("WHERE", "WHERE x IN (SELECT y FROM d WHERE z > 1)"),
        ("GROUP BY", "GROUP BY T1.name"),
        ("HAVING", "HAVING count(*) > 1"),
        ("SELECT", "SELECT DISTINCT T1.name, count(*)"),
        ("ORDER BY", "ORDER BY 2 DESC"),
        ("LIMIT", "LIMIT 3 OFFSET 1"),
    ]
    assert all(isinstance(c, Clause) and c.reward == 0.0 and not c.erroneous for c in split_clauses(sql))


def test_spans_index_the_original_text_not_regenerated_sql():
    sql = "select  t.a ,b\n  from   tab t   -- note\n where a = 'x''y'  order   by a ;"
    assert texts(sql) == [
        ("FROM", "from   tab t"),
        ("WHERE", "where a = 'x''y'"),
        ("SELECT", "select  t.a ,b"),
        ("ORDER BY", "order   by a"),
    ]


def test_set_operations_split_into_parts():
    sql = "SELECT a FROM t WHERE a > 1 UNION ALL SELECT b FROM u ORDER BY 1 LIMIT 2"
    sp = split_sql(sql)
    assert [(s.kind, s.part) for s in sp.spans] == [
        ("FROM", 0),
        ("WHERE", 0),
        ("SELECT", 0),
        ("FROM", 1),
        ("SELECT", 1),
        ("ORDER BY", 1),
        ("LIMIT", 1),
    ]
    assert sql[sp.spans[3].start : sp.spans[3].end] == "FROM u"


def test_parenthesised_parts():
    sql = "(SELECT a FROM t) EXCEPT (SELECT a FROM u WHERE a = 1)"
    assert texts(sql) == [
        ("FROM", "FROM t"),
        ("SELECT", "SELECT a"),
        ("FROM", "FROM u"),
        ("WHERE", "WHERE a = 1"),
        ("SELECT", "SELECT a"),
    ]


def test_subqueries_stay_in_enclosing_clause():
    sql = "SELECT (SELECT max(b) FROM u) AS m FROM (SELECT * FROM t WHERE a > 2) AS s ORDER BY (SELECT 1)"
    assert texts(sql) == [
        ("FROM", "FROM (SELECT * FROM t WHERE a > 2) AS s"),
        ("SELECT", "SELECT (SELECT max(b) FROM u) AS m"),
        ("ORDER BY", "ORDER BY (SELECT 1)"),
    ]


def test_cte_definitions_take_the_kind_of_their_referencing_clause():
    sql = "WITH x AS (SELECT 1 AS a), y(b) AS (SELECT a FROM x) SELECT * FROM t JOIN y ON t.a = y.b"
    sp = split_sql(sql)
    got = [(s.kind, sql[s.start : s.end], s.cte, s.ref) for s in sp.spans]
    join_idx = [i for i, s in enumerate(sp.spans) if s.kind == "JOIN" and s.cte is None][0]
    assert got[0] == ("JOIN", "WITH x AS (SELECT 1 AS a)", "x", join_idx)  # x is used by y, used by the JOIN
    assert got[1] == ("JOIN", "y(b) AS (SELECT a FROM x)", "y", join_idx)
    assert [g[0] for g in got[2:]] == ["FROM", "JOIN", "SELECT"]


def test_unparseable_sql_is_still_split_from_tokens():
    sql = "SELECT a, FROM t WHERE b = 'unterminated"
    sp = split_sql(sql)
    assert not sp.parsed
    assert [(s.kind, sql[s.start : s.end]) for s in sp.spans] == [
        ("FROM", "FROM t"),
        ("WHERE", "WHERE b = 'unterminated"),
        ("SELECT", "SELECT a,"),
    ]


def test_empty_sql_is_a_clear_error():
    with pytest.raises(ValueError, match="empty SQL"):
        split_clauses("   ")


@pytest.mark.skipif(
    not (DATA / "spider" / "dev_gold.sql").exists(),
    reason="../shared/data/spider/dev_gold.sql absent (real data lives beside the repo)",
)
def test_all_spider_dev_gold_queries_split_cleanly():
    lines = [ln.rstrip("\n").split("\t")[0] for ln in open(DATA / "spider" / "dev_gold.sql") if ln.strip()]
    assert len(lines) == 1034
    for sql in lines:
        sp = split_sql(sql)
        assert sp.parsed, sql
        kinds = [s.kind for s in sp.spans]
        assert "SELECT" in kinds and "FROM" in kinds, sql
        spans = sorted((s.start, s.end) for s in sp.spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"overlap in {sql}"
        covered = [False] * len(sql)
        for s in sp.spans:
            text = sql[s.start : s.end]
            assert text == text.strip(), sql
            assert re.match(_KEYWORD.get(s.kind, s.kind.lower() + r"\b"), text, re.IGNORECASE), (s.kind, text)
            covered[s.start : s.end] = [True] * (s.end - s.start)
        rest = "".join(" " if c else ch for ch, c in zip(sql, covered)).split()
        assert set(w.upper() for w in rest) <= {";", "UNION", "INTERSECT", "EXCEPT", "ALL"}, (sql, rest)
        for part in {s.part for s in sp.spans}:
            order = [s.kind for s in sp.spans if s.part == part]
            ranks = [
                "FROM JOIN WHERE GROUP-BY HAVING SELECT ORDER-BY LIMIT".split().index(k.replace(" ", "-"))
                for k in order
            ]
            assert ranks == sorted(ranks), sql
