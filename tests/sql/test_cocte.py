"""split_cocte / prefix_sql / step annotation on hand-written CoCTEs and a real Spider database."""

import sqlite3
from pathlib import Path

import pytest

from rewardsql_jax.sql.cocte import CoCTE, Step, annotate_steps, format_step_result, prefix_sql, split_cocte
from rewardsql_jax.sql.execute import ExecResult, execute

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SINGER_DB = DATA / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"

COCTE = (
    "WITH french_singers AS (\n  SELECT Singer_ID, Name, Age FROM singer WHERE Country = 'France'\n),\n\n"
    "old_french AS (\n  SELECT Name FROM french_singers WHERE Age > 30\n)\n\n"
    "SELECT COUNT(*) FROM old_french"
)


def test_split_spans_cover_name_as_body():
    c = split_cocte(COCTE)
    assert isinstance(c, CoCTE) and all(isinstance(s, Step) for s in c.steps)
    assert [s.name for s in c.steps] == ["french_singers", "old_french"]
    assert c.steps[0].body == "SELECT Singer_ID, Name, Age FROM singer WHERE Country = 'France'"
    assert c.steps[1].body == "SELECT Name FROM french_singers WHERE Age > 30"
    for s in c.steps:
        text = COCTE[s.start : s.end]
        assert text.startswith(f"{s.name} AS (") and text.endswith(")")
        assert s.body in text
    assert c.final == "SELECT COUNT(*) FROM old_french"
    # steps are ordered, disjoint and the final query follows the last step
    assert c.steps[0].end < c.steps[1].start
    assert COCTE.index(c.final) > c.steps[1].end


def test_split_is_robust_to_comments_strings_and_quoted_names():
    sql = (
        "/* lead ) */ with \"my step\"(a, b) AS (SELECT ')' AS a, '(' AS b -- ) trailing\n),"
        "  `x y` AS (SELECT a FROM \"my step\" WHERE b = ')),')   select * from `x y`"
    )
    c = split_cocte(sql)
    assert [s.name for s in c.steps] == ["my step", "x y"]
    assert sql[c.steps[0].start : c.steps[0].end].startswith('"my step"(a, b) AS (')
    assert c.steps[1].body == "SELECT a FROM \"my step\" WHERE b = ')),'"
    assert sql[c.steps[1].start : c.steps[1].end] == "`x y` AS (SELECT a FROM \"my step\" WHERE b = ')),')"
    assert c.final == "select * from `x y`"


def test_plain_query_has_zero_steps():
    c = split_cocte("  SELECT name FROM singer  ")
    assert c.steps == () and c.final == "SELECT name FROM singer"


def test_recursive_and_nested_ctes(tmp_path):
    db = tmp_path / "empty.sqlite"
    sqlite3.connect(db).close()
    sql = (
        "WITH RECURSIVE cnt(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM cnt WHERE x < 5),\n\n"
        "evens AS (WITH inner_cte AS (SELECT x FROM cnt) SELECT x FROM inner_cte WHERE x % 2 = 0)\n\n"
        "SELECT SUM(x) FROM evens"
    )
    c = split_cocte(sql)
    assert [s.name for s in c.steps] == ["cnt", "evens"]  # inner_cte is part of the 'evens' body
    assert c.steps[1].body.startswith("WITH inner_cte AS")
    assert execute(db, prefix_sql(sql, 1)).rows == tuple((i,) for i in range(1, 6))
    assert execute(db, prefix_sql(sql, 2)).rows == ((2,), (4,))


@pytest.mark.parametrize(
    "bad", ["", "   ", "SELECT FROM WHERE", "WITH a AS (SELECT 1 SELECT * FROM a", "SELECT 1; SELECT 2"]
)
def test_bad_sql_raises_value_error(bad):
    with pytest.raises(ValueError):
        split_cocte(bad)


def test_prefix_k_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"1\.\.2"):
        prefix_sql(COCTE, 0)
    with pytest.raises(ValueError, match="out of range"):
        prefix_sql(COCTE, 3)
    with pytest.raises(ValueError, match=r"0 CTE step"):
        prefix_sql("SELECT 1", 1)


def test_prefix_executes_on_real_spider_db():
    if not SINGER_DB.exists():
        pytest.skip(f"Spider data not found at {DATA} (expected ../shared/data beside the repo)")
    p1 = prefix_sql(COCTE, 1)
    assert p1.endswith("SELECT * FROM french_singers")
    r1 = execute(SINGER_DB, p1)
    direct = execute(SINGER_DB, "SELECT Singer_ID, Name, Age FROM singer WHERE Country = 'France'")
    assert r1.ok and r1.rows == direct.rows and len(r1.rows) > 0
    r2 = execute(SINGER_DB, prefix_sql(COCTE, 2))
    assert r2.ok and sorted(r2.rows) == sorted((row[1],) for row in direct.rows if row[2] > 30)
    ann = annotate_steps(SINGER_DB, COCTE)
    assert len(ann) == 3
    assert ann[0] == format_step_result(r1)
    assert ann[2] == f"<result>{{({len(r2.rows)},): 1}}</result>"


def test_format_step_result_counts_rows_and_truncates():
    r = ExecResult(ok=True, columns=("a",), rows=(("x",), ("y",), ("x",)))
    assert format_step_result(r) == "<result>{('x',): 2, ('y',): 1}</result>"
    big = ExecResult(ok=True, columns=("a",), rows=tuple((i,) for i in range(1000)))
    text = format_step_result(big)
    assert text == "<result>" + str({(i,): 1 for i in range(1000)})[:500] + "...}</result>"
    err = ExecResult(ok=False, error="no such table: foo")
    assert format_step_result(err) == "<result>Total SQL result:0, Execution error: no such table: foo</result>"


def test_annotate_uses_the_given_executor():
    calls = []

    def fake(db, sql):
        calls.append(sql)
        return ExecResult(ok=False, error="boom")

    out = annotate_steps("db", COCTE, executor=fake)
    assert len(out) == 3 and calls[-1] == COCTE and calls[0] == prefix_sql(COCTE, 1)
    assert all("boom" in o for o in out)
