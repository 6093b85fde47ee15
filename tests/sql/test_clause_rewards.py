"""EXPO-SQL clause-level rewards (3.2, Eqs. 1-3), Algorithm 1 (A.2) and Spider dev properties."""

import sqlite3
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from rewardsql_jax.sql import ClauseRewards, RewardOptions, clause_rewards, execute
from rewardsql_jax.sql.clauses import split_sql
from rewardsql_jax.sql.diff import diff_types
from rewardsql_jax.sql.incremental import build_steps, locate, run_steps

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPIDER = DATA / "spider"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("rewards") / "town.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE people(id INTEGER PRIMARY KEY, name TEXT, age INT, city_id INT);
        CREATE TABLE city(id INTEGER PRIMARY KEY, cname TEXT, pop INT);
        CREATE TABLE pets(id INTEGER PRIMARY KEY, owner_id INT, kind TEXT);
        INSERT INTO people VALUES (1,'ann',30,1),(2,'bob',40,1),(3,'cid',50,2),(4,'dan',40,2),(5,'eve',20,3);
        INSERT INTO city VALUES (1,'paris',100),(2,'rome',50),(3,'oslo',10);
        INSERT INTO pets VALUES (1,1,'cat'),(2,1,'dog'),(3,2,'cat'),(4,3,'fish'),(5,3,'cat');
    """)
    con.commit()
    con.close()
    return path


def by_kind(r: ClauseRewards, sql: str):
    return [(c.kind, sql[c.start : c.end], c.reward, c.erroneous) for c in r.clauses]


def flagged(r: ClauseRewards) -> set[str]:
    return {c.kind for c in r.clauses if c.erroneous}


def test_correct_case_all_clauses_plus_1_5(db):
    sql = "SELECT name FROM people WHERE age > 30 ORDER BY name"
    r = clause_rewards(db, sql, "select name from people where age > 30 order by name")
    assert r.case == "correct" and r.diff == frozenset() and r.db_calls == 2
    assert [c.kind for c in r.clauses] == ["FROM", "WHERE", "SELECT", "ORDER BY"]
    assert all(c.reward == 1.5 and not c.erroneous for c in r.clauses)


def test_gold_result_is_reused(db):
    gold_sql = "SELECT name FROM people WHERE age > 30"
    gold = execute(db, gold_sql)
    r = clause_rewards(db, "SELECT name FROM people WHERE age >= 31", gold_sql, gold_result=gold)
    assert r.case == "correct" and r.db_calls == 1


def test_wrong_where_constant_flags_where(db):
    pred = "SELECT name FROM people WHERE age > 35"
    r = clause_rewards(db, pred, "SELECT name FROM people WHERE age > 25")
    assert r.case == "incorrect" and r.diff == {"row_subset"}
    assert by_kind(r, pred) == [
        ("FROM", "FROM people", 0.5, False),
        ("WHERE", "WHERE age > 35", -0.5, True),
        ("SELECT", "SELECT name", 0.5, False),
    ]
    assert r.db_calls == 4  # gold, pred, FROM step, WHERE step (the SELECT step is the prediction itself)


def test_disjoint_where_uses_table12_fallback(db):
    # WHERE turns the FROM rows into a subset, the final diff is row_disjoint: Algorithm 1 alone flags nothing.
    pred, gold = "SELECT name FROM people WHERE age = 40", "SELECT name FROM people WHERE age = 20"
    split = split_sql(pred)
    steps = build_steps(pred)
    p, g = execute(db, pred), execute(db, gold)
    results, calls = run_steps(steps, p, lambda q: execute(db, q))
    final = diff_types(p, g)
    assert final == {"row_disjoint"} and calls == 2
    loc = locate(split, steps, results, g, final)
    assert loc.fallback and loc.step_diffs[1] == {"row_subset"}
    assert {split.spans[i].kind for i in loc.flagged} == {"FROM", "WHERE"}  # Table 12: FROM, JOIN, WHERE
    r = clause_rewards(db, pred, gold)
    assert r.case == "incorrect" and flagged(r) == {"FROM", "WHERE"}


def test_wrong_aggregate_flags_select(db):
    pred = "SELECT max(age) FROM people WHERE city_id = 1"
    r = clause_rewards(db, pred, "SELECT min(age) FROM people WHERE city_id = 1")
    assert r.case == "incorrect" and "row_partial" in r.diff
    assert "SELECT" in flagged(r) and "WHERE" not in flagged(r)


def test_wrong_group_aggregate_flags_select_not_group_by(db):
    pred = "SELECT city_id, max(age) FROM people GROUP BY city_id"
    r = clause_rewards(db, pred, "SELECT city_id, avg(age) FROM people GROUP BY city_id")
    assert r.case == "incorrect" and "row_partial" in r.diff
    assert flagged(r) >= {"SELECT"} and "GROUP BY" not in flagged(r)


def test_missing_distinct_is_row_dedup_on_select(db):
    pred, gold = "SELECT age FROM people", "SELECT DISTINCT age FROM people"
    assert clause_rewards(db, pred, gold).case == "correct"  # BIRD rule: sets of rows are equal
    r = clause_rewards(db, pred, gold, options=RewardOptions(match="ordered_bag"))
    assert r.case == "incorrect" and r.diff == {"row_dedup"} and flagged(r) == {"SELECT"}


def test_wrong_order_direction_flags_order_by(db):
    pred, gold = "SELECT name FROM people ORDER BY name DESC", "SELECT name FROM people ORDER BY name"
    r = clause_rewards(db, pred, gold, options=RewardOptions(match="ordered_bag"))
    assert r.case == "incorrect" and r.diff == {"row_order"} and flagged(r) == {"ORDER BY"}


def test_wrong_limit_flags_limit(db):
    pred = "SELECT name FROM people ORDER BY age DESC, name LIMIT 2"
    r = clause_rewards(db, pred, "SELECT name FROM people ORDER BY age DESC, name LIMIT 3")
    assert r.case == "incorrect" and r.diff == {"row_subset"} and flagged(r) == {"LIMIT"}


def test_wrong_having_threshold_flags_having(db):
    pred = "SELECT owner_id FROM pets GROUP BY owner_id HAVING count(*) > 2"
    r = clause_rewards(db, pred, "SELECT owner_id FROM pets GROUP BY owner_id HAVING count(*) > 1")
    assert r.case == "incorrect" and r.diff == {"row_emptied"} and flagged(r) == {"HAVING"}


def test_wrong_join_condition_flags_join(db):
    pred = "SELECT T1.name, T2.cname FROM people AS T1 JOIN city AS T2 ON T1.id = T2.id"
    r = clause_rewards(db, pred, "SELECT T1.name, T2.cname FROM people AS T1 JOIN city AS T2 ON T1.city_id = T2.id")
    assert r.case == "incorrect" and "JOIN" in flagged(r)
    assert any(c.reward > 0 for c in r.clauses)


def test_extra_union_part_flags_that_part(db):
    pred = "SELECT name FROM people WHERE age > 35 UNION SELECT cname FROM city"
    r = clause_rewards(db, pred, "SELECT name FROM people WHERE age > 35")
    assert r.case == "incorrect" and r.diff == {"row_superset"}
    split = split_sql(pred)
    bad_parts = {split.spans[i].part for i, c in enumerate(r.clauses) if c.erroneous}
    assert bad_parts == {1}


def test_where_alias_is_resolved_for_select_star_step(db):
    pred = "SELECT age * 2 AS dbl FROM people WHERE dbl > 70"
    steps = build_steps(pred)
    where = [s for s in steps if s.kinds == ("WHERE",)][0]
    assert "dbl" not in where.sql and execute(db, where.sql).ok
    r = clause_rewards(db, pred, "SELECT age * 2 AS dbl FROM people WHERE dbl > 50")
    assert r.case == "incorrect" and flagged(r) == {"WHERE"}


def test_cte_inherits_the_referencing_clause(db):
    pred = "WITH old AS (SELECT * FROM people WHERE age > 45) SELECT name FROM old"
    r = clause_rewards(db, pred, "SELECT name FROM people WHERE age > 25")
    assert r.case == "incorrect"
    cte, from_ = r.clauses[0], r.clauses[1]
    assert pred[cte.start : cte.end].startswith("WITH old") and from_.kind == "FROM"
    assert cte.kind == "FROM" and cte.erroneous == from_.erroneous
    assert any(c.erroneous for c in r.clauses)


def test_error_case_join_dropped_order_by_column(db):
    # Figure 2: the ORDER BY column does not exist in the wrongly joined table; the JOIN is the root cause.
    pred = "SELECT T1.name FROM people AS T1 JOIN pets AS us ON T1.id = us.owner_id ORDER BY us.pop DESC"
    r = clause_rewards(db, pred, "SELECT T1.name FROM people AS T1 JOIN city AS c ON T1.city_id = c.id ORDER BY c.pop")
    assert r.case == "error" and r.diff == frozenset()
    assert by_kind(r, pred) == [
        ("FROM", "FROM people AS T1", -0.5, False),
        ("JOIN", "JOIN pets AS us ON T1.id = us.owner_id", -1.5, True),
        ("SELECT", "SELECT T1.name", -0.5, False),
        ("ORDER BY", "ORDER BY us.pop DESC", -1.5, True),
    ]


def test_error_case_syntax_error_sqlglot_cannot_parse(db):
    pred = "SELECT name FROM people WHERE age > 30 AND AND city_id = 1"
    assert not split_sql(pred).parsed
    r = clause_rewards(db, pred, "SELECT name FROM people")
    assert r.case == "error" and flagged(r) == {"WHERE"}
    assert {c.reward for c in r.clauses if not c.erroneous} == {-0.5}


def test_syntax_error_token_occurring_twice_flags_the_failing_occurrence(db):
    pred = "SELECT name FROM people WHERE age > 30 ORDER name"
    r = clause_rewards(db, pred, "SELECT name FROM people")
    assert r.case == "error" and flagged(r) == {"WHERE"}  # the second "name", not the SELECT's


def test_timeout_is_an_execution_error(db):
    pred = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    r = clause_rewards(db, pred, "SELECT count(*) FROM people", timeout_s=0.2)
    assert r.case == "error"
    assert all(c.erroneous for c in r.clauses if c.kind == "FROM")
    assert [c.erroneous for c in r.clauses if c.kind == "SELECT"] == [False]


def test_custom_reward_constants(db):
    opts = RewardOptions(correct=3.0, incorrect_erroneous=-1.0, incorrect_other=1.0)
    r = clause_rewards(
        db, "SELECT name FROM people WHERE age > 35", "SELECT name FROM people WHERE age > 25", options=opts
    )
    assert sorted(c.reward for c in r.clauses) == [-1.0, 1.0, 1.0]


def test_bad_inputs(db):
    with pytest.raises(ValueError, match="match must be one of"):
        RewardOptions(match="exact")
    with pytest.raises(ValueError, match="finite"):
        RewardOptions(correct=float("nan"))
    with pytest.raises(ValueError, match="gold SQL failed"):
        clause_rewards(db, "SELECT 1", "SELECT nope FROM people")
    for bad in ("  ", None, "SELECT 1 " + "-" * 200_000):
        r = clause_rewards(db, bad, "SELECT name FROM people")
        assert r.case == "error" and r.clauses == () and r.db_calls == 1


# ---- Spider dev properties ------------------------------------------------------------------------


def _spider_dev():
    if not (SPIDER / "dev_gold.sql").exists():
        pytest.skip("../shared/data/spider absent (real data lives beside the repo checkout)")
    out = []
    for line in open(SPIDER / "dev_gold.sql"):
        if line.strip():
            sql, db_id = line.rstrip("\n").split("\t")
            path = SPIDER / "database" / db_id / f"{db_id}.sqlite"
            if path.exists():
                out.append((path, sql))
    return out


def _perturb(sql: str) -> list[str]:
    """Mispredictions: drop the right operand of the first AND, or change the first literal constant."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    out = []
    conj = next(tree.find_all(exp.And), None)
    if conj is not None:
        t = tree.copy()
        next(t.find_all(exp.And)).replace(conj.this.copy())
        out.append(t.sql(dialect="sqlite"))
    lit = next((lit for lit in tree.find_all(exp.Literal) if lit.find_ancestor(exp.Limit) is None), None)
    if lit is not None:
        t = tree.copy()
        target = next(lt for lt in t.find_all(exp.Literal) if lt.find_ancestor(exp.Limit) is None)
        new = exp.Literal.number(float(target.this) + 1) if not target.is_string else exp.Literal.string("zz_none")
        target.replace(new)
        out.append(t.sql(dialect="sqlite"))
    return out


def test_spider_dev_gold_against_itself_is_correct():
    items = _spider_dev()
    assert len(items) == 972
    for path, sql in items:
        r = clause_rewards(path, sql, sql)
        assert r.case == "correct", sql
        assert r.clauses and all(c.reward == 1.5 and not c.erroneous for c in r.clauses), sql


def _check_perturbed(items):
    wrong = 0
    for path, sql in items:
        for bad in _perturb(sql):
            r = clause_rewards(path, bad, sql)
            assert r.case in ("correct", "incorrect", "error")
            pred, gold = execute(path, bad), execute(path, sql)
            assert (r.case == "error") == (not pred.ok), bad
            if pred.ok and set(pred.rows) != set(gold.rows):
                wrong += 1
                assert r.case == "incorrect" and r.diff, bad
                assert any(c.reward < 0 for c in r.clauses), f"all-positive rewards for wrong query {bad}"
                assert all(c.reward in (-0.5, 0.5) for c in r.clauses)
    return wrong


def test_spider_dev_perturbed_never_all_positive_sample():
    items = _spider_dev()[::4]
    assert _check_perturbed(items) >= 50


@pytest.mark.slow
def test_spider_dev_perturbed_never_all_positive_full():
    assert _check_perturbed(_spider_dev()) >= 200
