"""EX (BIRD / Spider test-suite) and ExecF1: rule-by-rule unit tests, then agreement with the official
evaluators' logic on Spider dev gold queries and sqlglot perturbations of them."""

from __future__ import annotations

import functools
import random
import sqlite3
import time
from collections import defaultdict
from itertools import product

import pytest
import sqlglot
from sqlglot import exp

from rewardsql_jax.sql import ExecResult, ExecutorPool, exec_f1, exec_match, exec_match_batch, result_f1, results_match
from rewardsql_jax.sql.compare import (
    cell_f1,
    soft_f1,
    spider_order_matters,
    spider_prepare,
    spider_remove_distinct,
    spider_rows_match,
)


def ok(*rows, columns=None):
    rows = tuple(tuple(r) for r in rows)
    return ExecResult(ok=True, columns=columns or tuple(f"c{i}" for i in range(len(rows[0]) if rows else 0)), rows=rows)


FAILED = ExecResult(ok=False, error="no such column: x")
TIMED_OUT = ExecResult(ok=False, error="interrupted", timed_out=True)


# ---- rule-by-rule -------------------------------------------------------------------------------
def test_column_permutation():
    gold, pred = ok((1, "a"), (2, "b")), ok(("a", 1), ("b", 2))
    assert results_match(pred, gold, "spider")
    assert not results_match(pred, gold, "bird")  # BIRD compares whole tuples
    # A permutation must be one mapping for all rows.
    assert not spider_rows_match([(1, 2), (3, 4)], [(1, 2), (4, 3)], order_matters=False)
    assert spider_rows_match([(1, 1, 2), (1, 1, 3)], [(1, 2, 1), (1, 3, 1)], order_matters=False)


def test_bag_vs_set_semantics():
    gold, pred = ok((1,), (1,), (2,)), ok((1,), (2,), (2,))
    assert results_match(pred, gold, "bird")  # sets {1, 2} == {1, 2}
    assert not results_match(pred, gold, "spider")  # bags differ
    assert results_match(ok((1,), (2,)), ok((1,), (1,), (2,)), "bird")  # duplicates ignored by BIRD
    assert not results_match(ok((1,), (2,)), ok((1,), (1,), (2,)), "spider")  # row count differs


def test_order_sensitivity_follows_gold_order_by():
    gold, pred = ok((1,), (2,)), ok((2,), (1,))
    assert results_match(pred, gold, "spider", order_matters=False)
    assert not results_match(pred, gold, "spider", order_matters=True)
    assert results_match(pred, gold, "bird")
    assert spider_order_matters(spider_prepare("SELECT a FROM t ORDER BY a", prediction=False))
    assert not spider_order_matters("SELECT a FROM t ORDER  BY a")  # official substring test, verbatim


def test_empty_results_and_shapes():
    empty = ExecResult(ok=True, columns=("a",), rows=())
    assert results_match(empty, ExecResult(ok=True, columns=("a", "b"), rows=()), "spider")
    assert results_match(empty, empty, "bird")
    assert not results_match(ok((1, 2)), ok((1,)), "spider")
    assert not results_match(ok((1,)), empty, "spider") and not results_match(ok((1,)), empty, "bird")


def test_nulls():
    assert results_match(ok((None, 1)), ok((None, 1)), "bird")
    assert results_match(ok((1, None)), ok((None, 1)), "spider")
    assert not results_match(ok((None,)), ok((0,)), "bird")
    assert not results_match(ok((None,)), ok(("None",)), "spider")  # quick_rej keys differ by type


def test_floats_are_compared_exactly_like_the_official_scripts():
    assert results_match(ok((1,)), ok((1.0,)), "bird") and results_match(ok((1,)), ok((1.0,)), "spider")
    assert not results_match(ok((0.1 + 0.2,)), ok((0.3,)), "bird")
    assert not results_match(ok((0.1 + 0.2,)), ok((0.3,)), "spider")
    # The official quick rejection sorts values by str(v)+str(type(v)): (1, 1.5) and (1.0, 1.5) sort
    # differently, so the test-suite evaluator rejects this pair although 1 == 1.0.
    assert not spider_rows_match([(1, 1.5)], [(1.0, 1.5)], order_matters=False)
    assert spider_rows_match([(2, 1.5)], [(2.0, 1.5)], order_matters=False)


def test_errors_and_timeouts_are_wrong():
    for mode in ("bird", "spider"):
        assert not results_match(FAILED, ok((1,)), mode)
        assert not results_match(ok((1,)), FAILED, mode)
        assert not results_match(TIMED_OUT, TIMED_OUT, mode)
    assert result_f1(FAILED, ok((1,))) == 0.0 and result_f1(ok((1,)), TIMED_OUT, "cells") == 0.0
    with pytest.raises(ValueError, match="mode"):
        results_match(ok((1,)), ok((1,)), "sqlite")
    with pytest.raises(ValueError, match="kind"):
        result_f1(ok((1,)), ok((1,)), "rows")


def test_spider_text_preprocessing():
    assert (
        spider_prepare("SELECT count(DISTINCT a) FROM t WHERE b > = 3", prediction=False)
        == "SELECT count( a) FROM t WHERE b >= 3"
    )
    assert spider_prepare("SELECT a FROM t WHERE b = value ", prediction=True) == "SELECT a FROM t WHERE b = 1 "
    assert spider_prepare("SELECT YEAR(CURDATE()) - 1", prediction=False) == "SELECT 2020- 1"
    assert (
        spider_remove_distinct("SELECT 'distinct', \"distinct\" -- distinct")
        == "SELECT 'distinct', \"distinct\" -- distinct"
    )
    assert spider_remove_distinct("SELECT a FROM t; DROP TABLE t") == "SELECT a FROM t; "  # first statement only
    assert spider_remove_distinct("   ") is None and spider_prepare("", prediction=True) is None


def test_exec_match_on_hand_built_db(tiny_db):
    gold = "SELECT name FROM person WHERE city = 'Oslo' ORDER BY name"
    assert exec_match(tiny_db, "SELECT name FROM person WHERE city = 'Oslo'", gold)
    assert not exec_match(
        tiny_db, "SELECT name FROM person WHERE city = 'Oslo' ORDER BY name DESC", gold, mode="spider"
    )
    assert exec_match(tiny_db, "SELECT name FROM person WHERE city = 'Oslo' ORDER BY name DESC", gold, mode="bird")
    # DISTINCT is removed from both sides by the test-suite defaults; BIRD compares sets anyway.
    assert exec_match(tiny_db, "SELECT DISTINCT age FROM person", "SELECT age FROM person", mode="spider")
    assert exec_match(tiny_db, "SELECT DISTINCT age FROM person", "SELECT age FROM person", mode="bird")
    assert not exec_match(tiny_db, "SELECT nope FROM person", gold)
    assert not exec_match(tiny_db, "", gold, mode="spider") and not exec_match(tiny_db, gold, "SELECT nope")
    assert not exec_match(
        tiny_db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c", gold, timeout_s=0.3
    )


def test_soft_f1_matches_bird_mini_dev_definition():
    assert soft_f1([], []) == 1.0 and soft_f1([(1,)], []) == 0.0 and soft_f1([], [(1,)]) == 0.0
    assert soft_f1([(1, "a"), (2, "b")], [("a", 1), ("b", 2)]) == 1.0  # values matched per row, any column
    # pred row 0 matches 1 of 2 gold values; gold row 1 is unmatched: tp .5, fp .5, fn .5 + 1.
    assert soft_f1([(1, "x")], [(1, "a"), (2, "b")]) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert soft_f1([(1,), (1,), (2,)], [(1,), (2,)]) == 1.0  # duplicates dropped first
    assert soft_f1([(2,), (1,)], [(1,), (2,)]) == 0.0  # rows are paired by position


def test_cell_f1_multiset_definition():
    assert cell_f1([], []) == 1.0
    assert cell_f1([(1, "a")], [("a", 1)]) == 1.0
    # pred cells {1,1,2} vs gold {1,2,2}: TP 2 (1 and 2 once each), FP 1, FN 1 -> P = R = 2/3.
    assert cell_f1([(1,), (1,), (2,)], [(1,), (2,), (2,)]) == pytest.approx(2 / 3)
    assert cell_f1([(" Ann ", 2.0, 0.30000000000000004)], [("Ann", 2, 0.3)]) == 1.0  # normalised cells
    assert cell_f1([(1,)], [(2,)]) == 0.0


def test_exec_f1_on_hand_built_db(tiny_db):
    gold = "SELECT name FROM person WHERE age = 30"
    assert exec_f1(tiny_db, gold, gold) == 1.0
    assert exec_f1(tiny_db, "SELECT name FROM person WHERE age >= 30", gold, kind="cells") == pytest.approx(
        2 * (2 / 3) / (1 + 2 / 3)
    )
    assert exec_f1(tiny_db, "SELECT nope FROM person", gold) == 0.0


# ---- reference transcriptions of the official scripts ----------------------------------------
# Minimal transcriptions of the official logic, kept independent of rewardsql_jax.sql.compare.
# BIRD: bird-bench/mini_dev evaluation/evaluation_ex.py (calculate_ex) + evaluation_utils.py (execute_sql).
# Spider: taoyds/test-suite-sql-eval exec_eval.py (eval_exec_match, result_eq, quick_rej, unorder_row,
# multiset_eq, get_constraint_permutation, postprocess, replace_cur_year), parse.py (remove_distinct,
# via sqlparse) and evaluation.py (prediction " value " -> " 1 "); plug_value and keep_distinct off.
def _ref_run(db, sql, text_factory=None, timeout=10.0):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # read-only so the reference cannot hurt data
    if text_factory:
        conn.text_factory = text_factory
    deadline = time.monotonic() + timeout  # stands in for the scripts' process-level timeouts
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    try:
        return "result", conn.execute(sql).fetchall()
    except Exception as e:
        return "exception", e
    finally:
        conn.close()


def ref_bird(db, pred, gold):
    pf, p = _ref_run(db, pred)
    gf, g = _ref_run(db, gold)
    return pf == gf == "result" and set(p) == set(g)


def _ref_unorder_row(row):
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def _ref_quick_rej(r1, r2, order_matters):
    s1, s2 = [_ref_unorder_row(r) for r in r1], [_ref_unorder_row(r) for r in r2]
    return s1 == s2 if order_matters else set(s1) == set(s2)


def _ref_multiset_eq(l1, l2):
    if len(l1) != len(l2):
        return False
    d = defaultdict(int)
    for e in l1:
        d[e] += 1
    for e in l2:
        d[e] -= 1
        if d[e] < 0:
            return False
    return True


def _ref_constraint_perms(tab1_sets, result2):
    n = len(result2[0])
    cons = [set(range(n)) for _ in range(n)]
    if n <= 3:
        return product(*cons)
    for _ in range(20):
        row = random.choice(result2)
        for c1 in range(n):
            for c2 in set(cons[c1]):
                if row[c2] not in tab1_sets[c1]:
                    cons[c1].remove(c2)
    return product(*cons)


def ref_result_eq(result1, result2, order_matters):
    if len(result1) == 0 and len(result2) == 0:
        return True
    if len(result1) != len(result2):
        return False
    n = len(result1[0])
    if len(result2[0]) != n:
        return False
    if not _ref_quick_rej(result1, result2, order_matters):
        return False
    tab1_sets = [{row[i] for row in result1} for i in range(n)]
    for perm in _ref_constraint_perms(tab1_sets, result2):
        if len(perm) != len(set(perm)):
            continue
        r2 = result2 if n == 1 else [tuple(e[i] for i in perm) for e in result2]
        if order_matters:
            if result1 == r2:
                return True
        elif set(result1) == set(r2) and _ref_multiset_eq(result1, r2):
            return True
    return False


@functools.cache
def _ref_remove_distinct(s):
    sqlparse = pytest.importorskip("sqlparse", reason="the Spider reference needs sqlparse (pip install sqlparse)")
    return "".join(t.value for t in sqlparse.parse(s)[0].flatten() if t.value.lower() != "distinct")


def ref_spider(db, p_str, g_str):
    import re

    def fix(q):
        return q.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")

    def cur_year(q):
        return re.sub(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", "2020", q, flags=re.IGNORECASE)

    def decode(b):
        return b.decode(errors="ignore")

    p_str = p_str.replace(" value ", " 1 ")
    p_str, g_str = _ref_remove_distinct(fix(p_str)), _ref_remove_distinct(fix(g_str))
    order_matters = "order by" in g_str.lower()
    gf, g = _ref_run(db, cur_year(g_str), decode)
    pf, p = _ref_run(db, cur_year(p_str), decode)
    assert gf != "exception", f"gold query {g_str} fails"
    return pf != "exception" and ref_result_eq(g, p, order_matters)


def test_reference_result_eq_agrees_with_ours_on_random_tables():
    rng = random.Random(0)
    values = [0, 1, 1.0, 2, "1", "a", None, 2.5]
    for _ in range(3000):
        ncols, nrows = rng.randint(1, 5), rng.randint(0, 4)
        gold = [tuple(rng.choice(values) for _ in range(ncols)) for _ in range(nrows)]
        perm = rng.sample(range(ncols), ncols)
        pred = [tuple(r[i] for i in perm) for r in gold]
        if rng.random() < 0.5:
            rng.shuffle(pred)
        if pred and rng.random() < 0.5:
            i, j = rng.randrange(len(pred)), rng.randrange(ncols)
            pred[i] = pred[i][:j] + (rng.choice(values),) + pred[i][j + 1 :]
        for order in (False, True):
            assert spider_rows_match(gold, pred, order) == ref_result_eq(gold, pred, order), (gold, pred, order)


def test_remove_distinct_matches_sqlparse(spider_dir, data_dir):
    import json

    lines = {split: (spider_dir / f"{split}_gold.sql").read_text().splitlines() for split in ("dev", "train")}
    sqls = [ln.rsplit("\t", 1)[0] for ln in lines["dev"] + lines["train"][::5] if ln.strip()]
    sqls += [q["SQL"] for q in json.loads((data_dir / "bird" / "dev" / "dev.json").read_text())]
    sqls += [
        "select count(distinct(a)) from t",
        "select a is distinct from b",
        "select t.distinct from t",
        "SELECT 1; -- c\n SELECT 2",
        "SELECT (1;2); SELECT 3",
        "SELECT (CASE WHEN 1 THEN 2 END; 3)",
        "select a\n;\n-- c\n",
        "SELECT a AS GO FROM t",
        "SELECT a FROM t GO 2 x",
        "select ?distinct, :distinct",
        "select 'it\\'s distinct', [distinct], `distinct`, $$distinct$$",
        "select 1e5distinct",
        "select a # distinct\n",
    ]
    for s in sqls:
        assert spider_remove_distinct(s) == _ref_remove_distinct(s), s


# ---- real data: gold as prediction, and perturbed predictions ----------------------------------
_AGG_SWAP = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Count: exp.Sum, exp.Sum: exp.Avg, exp.Avg: exp.Sum}


def _outer_select(t):
    return t if isinstance(t, exp.Select) else t.find(exp.Select)


def _change_constant(t):
    for lit in t.find_all(exp.Literal):
        if lit.is_string:
            lit.replace(exp.Literal.string(lit.this + "_x"))
            return True
        if lit.this.lstrip("-").isdigit():
            lit.replace(exp.Literal.number(int(lit.this) + 1))
            return True
    return False


def _drop_condition(t):
    w = t.find(exp.Where)
    if w is None:
        return False
    w.this.replace(w.this.left) if isinstance(w.this, exp.And) else w.pop()
    return True


def _swap_order(t):
    o = t.find(exp.Ordered)
    return o is not None and o.set("desc", not o.args.get("desc")) is None


def _drop_order(t):
    o = t.find(exp.Order)
    return o is not None and o.pop() is not None


def _extra_distinct(t):
    s = _outer_select(t)
    return s is not None and not s.args.get("distinct") and s.set("distinct", exp.Distinct()) is None


def _wrong_aggregate(t):
    node = next(t.find_all(*_AGG_SWAP), None)
    return node is not None and node.replace(_AGG_SWAP[type(node)](this=node.this)) is not None


def _reverse_columns(t):
    s = _outer_select(t)
    return s is not None and len(s.expressions) > 1 and s.set("expressions", s.expressions[::-1]) is None


PERTURBATIONS = {
    "constant": _change_constant,
    "drop_condition": _drop_condition,
    "swap_order": _swap_order,
    "drop_order": _drop_order,
    "distinct": _extra_distinct,
    "aggregate": _wrong_aggregate,
    "reverse_columns": _reverse_columns,
}


def perturb(sql: str) -> dict[str, str]:
    """sqlglot rewrites of a gold query, one per perturbation that applies."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    out = {}
    for name, fn in PERTURBATIONS.items():
        t = tree.copy()
        if fn(t):
            out[name] = t.sql(dialect="sqlite")
    return out


@pytest.fixture(scope="module")
def pool():
    with ExecutorPool(workers=2) as p:
        yield p


@pytest.mark.parametrize("mode", ["bird", "spider"])
def test_gold_as_prediction_is_100_percent_on_spider_dev(spider_dev, pool, mode):
    items = [(db, sql, sql) for db, sql, _ in spider_dev]
    verdicts = exec_match_batch(items, mode=mode, pool=pool)
    print(f"\nSpider dev gold-as-prediction EX ({mode}): {sum(verdicts)}/{len(verdicts)}")
    assert len(verdicts) == 972 and all(verdicts)


def test_agreement_with_official_evaluators_on_perturbed_spider_dev(spider_dev, pool):
    pytest.importorskip("sqlparse", reason="the Spider reference needs sqlparse (pip install sqlparse)")
    items, kinds = [], []
    for db, gold, _ in spider_dev:
        for kind, pred in perturb(gold).items():
            items.append((db, pred, gold))
            kinds.append(kind)
    report = []
    for mode, ref in (("bird", ref_bird), ("spider", ref_spider)):
        ours = exec_match_batch(items, mode=mode, pool=pool, timeout_s=10.0)
        theirs = [ref(db, p, g) for db, p, g in items]
        disagree = [(k, it) for k, it, a, b in zip(kinds, items, ours, theirs) if a != b]
        rate = 1 - len(disagree) / len(items)
        correct = sum(theirs)
        report.append(
            f"{mode}: agreement {rate:.2%} on {len(items)} perturbed predictions "
            f"({correct} judged correct by the official logic)"
        )
        assert not disagree, disagree[:5]
    print("\n" + "\n".join(report))
    assert len(items) > 2500 and len(set(kinds)) == len(PERTURBATIONS)
