"""Benchmark: EXPO-SQL clause_rewards on Spider dev mispredictions (paper Table 10: ~3.4 DB calls, ~3 ms/call).

Mispredictions are built from the gold queries with sqlglot: change a constant, drop a condition, swap an
aggregate (incorrect results), and misspell a column, swap a table or break the syntax (execution errors).
Prints per perturbation the case counts, the fraction where the perturbed clause kind is flagged, and overall
mean DB calls per query, ms per DB call (time inside ``execute``) and ms per query (whole ``clause_rewards``).

    python benchmarks/sql_clause_rewards.py [--limit N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import sqlglot
from sqlglot import exp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewardsql_jax.sql import clause_rewards, execute

SPIDER = ROOT.parent / "shared" / "data" / "spider"
_AGG_SWAP = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Avg: exp.Sum, exp.Sum: exp.Avg, exp.Count: exp.Sum}


def _first(tree, kind, pred=lambda n: True):
    return next((n for n in tree.find_all(kind) if pred(n)), None)


def _not_in_limit(n):
    return n.find_ancestor(exp.Limit) is None


def perturb(sql: str) -> dict[str, tuple[str, str]]:
    """``{name: (perturbed_sql, clause kind it touched)}`` for the perturbations that apply to ``sql``."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    out: dict[str, tuple[str, str]] = {}

    def clause_of(node) -> str:
        for anc, kind in (
            (exp.Where, "WHERE"),
            (exp.Having, "HAVING"),
            (exp.Join, "JOIN"),
            (exp.Order, "ORDER BY"),
            (exp.Group, "GROUP BY"),
            (exp.From, "FROM"),
        ):
            if node.find_ancestor(anc) is not None:
                return kind
        return "SELECT"

    def mutate(name, kind, pred, fn):
        t = tree.copy()
        node = _first(t, kind, pred)
        if node is not None:
            where = clause_of(node)
            fn(node)
            out[name] = (t.sql(dialect="sqlite"), where)

    mutate(
        "constant",
        exp.Literal,
        _not_in_limit,
        lambda n: n.replace(exp.Literal.string("zz_none") if n.is_string else exp.Literal.number(float(n.this) + 1)),
    )
    mutate("drop_condition", exp.And, lambda n: True, lambda n: n.replace(n.this.copy()))
    mutate(
        "swap_aggregate",
        exp.AggFunc,
        lambda n: type(n) in _AGG_SWAP and not isinstance(n.this, exp.Star),
        lambda n: n.replace(_AGG_SWAP[type(n)](this=n.this.copy())),
    )
    mutate(
        "bad_column",
        exp.Column,
        lambda n: n.find_ancestor(exp.Select) is not None,
        lambda n: n.set("this", exp.to_identifier(n.name + "_x")),
    )
    mutate("bad_table", exp.Table, lambda n: True, lambda n: n.set("this", exp.to_identifier(n.name + "_x")))
    text = tree.sql(dialect="sqlite")
    if " FROM " in text:
        out["syntax"] = (text.replace(" FROM ", ", FROM ", 1), "SELECT")
    return out


def main(argv=None) -> dict:
    """Run the benchmark; returns the summary numbers it prints."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="use only the first N gold queries (0: all)")
    args = ap.parse_args(argv)
    if not (SPIDER / "dev_gold.sql").exists():
        print(f"Spider data not found at {SPIDER}; place ../shared/data beside the repo")
        return {}
    items = []
    for line in open(SPIDER / "dev_gold.sql"):
        if line.strip():
            sql, db_id = line.rstrip("\n").split("\t")
            path = SPIDER / "database" / db_id / f"{db_id}.sqlite"
            if path.exists():
                items.append((path, sql))
    if args.limit:
        items = items[: args.limit]

    call_s: list[float] = []

    def timed_execute(db, sql, **kw):
        t0 = time.perf_counter()
        res = execute(db, sql, **kw)
        call_s.append(time.perf_counter() - t0)
        return res

    cases: dict[str, Counter] = defaultdict(Counter)
    hit: dict[str, list[bool]] = defaultdict(list)
    n_flagged: dict[str, list[int]] = defaultdict(list)
    calls: dict[str, list[int]] = defaultdict(list)
    query_s = []
    for path, gold in items:
        for name, (bad, kind) in perturb(gold).items():
            t0 = time.perf_counter()
            r = clause_rewards(path, bad, gold, execute_fn=timed_execute)
            query_s.append(time.perf_counter() - t0)
            cases[name][r.case] += 1
            if r.case == "correct":
                continue
            calls[r.case].append(r.db_calls)
            flagged = {c.kind for c in r.clauses if c.erroneous}
            hit[name].append(kind in flagged)
            n_flagged[name].append(sum(c.erroneous for c in r.clauses) / max(1, len(r.clauses)))
            assert r.case == "error" or any(c.reward < 0 for c in r.clauses), bad
    print(f"Spider dev: {len(items)} gold queries, {len(query_s)} perturbed predictions")
    print(
        f"{'perturbation':16s} {'correct':>8s} {'incorrect':>9s} {'error':>6s} {'touched flagged':>16s} "
        f"{'flagged share':>14s}"
    )
    for name in cases:
        c = cases[name]
        h = hit[name]
        print(
            f"{name:16s} {c['correct']:8d} {c['incorrect']:9d} {c['error']:6d} "
            f"{(sum(h) / len(h) if h else float('nan')):16.1%} "
            f"{(statistics.mean(n_flagged[name]) if n_flagged[name] else float('nan')):14.1%}"
        )
    all_calls = calls["incorrect"] + calls["error"]
    summary = {
        "predictions": len(query_s),
        "mean_db_calls": statistics.mean(all_calls),
        "mean_db_calls_incorrect": statistics.mean(calls["incorrect"]),
        "mean_db_calls_error": statistics.mean(calls["error"]),
        "ms_per_call": 1e3 * sum(call_s) / len(call_s),
        "ms_per_query": 1e3 * statistics.mean(query_s),
    }
    print(
        f"mean DB calls per wrong prediction: {summary['mean_db_calls']:.2f} (paper ~3.4); incorrect-result "
        f"case {summary['mean_db_calls_incorrect']:.2f}, execution-error case {summary['mean_db_calls_error']:.2f}"
    )
    print(f"mean ms per DB call: {summary['ms_per_call']:.2f} (paper ~3)")
    print(f"mean ms per clause_rewards call: {summary['ms_per_query']:.2f}")
    return summary


if __name__ == "__main__":
    main()
