"""SQL engine throughput on Spider dev gold queries: single process vs ExecutorPool with 1 and N workers.

    python benchmarks/sql.py [--passes 5] [--workers N] [--skip-clause-rewards]

Prints executions/s for: execute() (fresh sandboxed connection per query), the same with a cached
connection, ExecutorPool(1) and ExecutorPool(N) with the result cache off, and the pool again
with a warm cache (the repeated gold queries of RL). Then the clause-rewards slot (EXPO-SQL).
Data: the shared/data folder beside the repository root.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPIDER = ROOT.parent / "shared" / "data" / "spider"

from rewardsql_jax.sql import ExecutorPool, execute
from rewardsql_jax.sql.execute import connect_readonly, run_query


def load_dev() -> list[tuple[str, str]]:
    """(db_path, gold_sql) of the Spider dev questions whose database is shipped."""
    jobs = []
    for line in (SPIDER / "dev_gold.sql").read_text().splitlines():
        if line.strip():
            sql, db_id = line.rsplit("\t", 1)
            db = SPIDER / "database" / db_id / f"{db_id}.sqlite"
            if db.exists():
                jobs.append((str(db), sql))
    return jobs


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_single(jobs):
    results, dt = _timed(lambda: [execute(db, sql) for db, sql in jobs])
    assert all(r.ok for r in results)
    return dt


def bench_single_cached(jobs):
    conns = {}

    def run():
        out = []
        for db, sql in jobs:
            if db not in conns:
                conns[db] = connect_readonly(db)
            out.append(run_query(conns[db], sql))
        return out

    results, dt = _timed(run)
    for c in conns.values():
        c.close()
    assert all(r.ok for r in results)
    return dt


def bench_pool(jobs, workers, *, cache):
    start = time.perf_counter()
    with ExecutorPool(workers=workers, cache_size=65536 if cache else 0) as pool:
        pool.map(jobs[: workers * 4])  # wait until every worker is up
        startup = time.perf_counter() - start
        if cache:
            pool.map(jobs)  # fill the cache; the timed pass is all hits
        results, dt = _timed(lambda: pool.map(jobs))
    assert all(r.ok for r in results)
    return dt, startup


def bench_clause_rewards(limit: int = 200):
    """SLOT (EXPO-SQL clause rewards, owned by the clause-rewards work): mean DB calls and ms per
    ``clause_rewards`` call on Spider dev mispredictions (sqlglot perturbations that fail EX).
    Skips with a note when ``rewardsql_jax.sql.clause_rewards`` is not available."""
    try:
        import sqlglot
        from sqlglot import exp

        from rewardsql_jax.sql import exec_match
        from rewardsql_jax.sql.clause_rewards import clause_rewards
    except ImportError as e:
        print(f"\nclause_rewards benchmark skipped: {e}")
        return
    swaps = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Count: exp.Sum, exp.Sum: exp.Avg, exp.Avg: exp.Sum}
    cases = []
    for db, gold in load_dev():
        tree = sqlglot.parse_one(gold, read="sqlite")
        where, agg = tree.find(exp.Where), next(tree.find_all(*swaps), None)
        if where is not None:
            where.pop()
        elif agg is not None:
            agg.replace(swaps[type(agg)](this=agg.this))
        pred = tree.sql(dialect="sqlite")
        if pred != gold and not exec_match(db, pred, gold):
            cases.append((db, pred, gold))
        if len(cases) >= limit:
            break
    calls, seconds = 0, 0.0
    for db, pred, gold in cases:
        out, dt = _timed(functools.partial(clause_rewards, db, pred, gold))
        calls += out.db_calls
        seconds += dt
    print(
        f"\nclause_rewards on {len(cases)} Spider dev mispredictions: {calls / len(cases):.2f} DB calls/query, "
        f"{1000 * seconds / max(calls, 1):.2f} ms per DB call, {1000 * seconds / len(cases):.2f} ms per query"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5, help="copies of the dev gold set per measurement")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-clause-rewards", action="store_true")
    args = parser.parse_args()
    if not SPIDER.exists():
        sys.exit(f"Spider data not found at {SPIDER} (the shared/data folder beside the repo root)")
    dev = load_dev()
    jobs = dev * args.passes
    print(
        f"Spider dev gold: {len(dev)} queries x {args.passes} passes = {len(jobs)} executions; "
        f"os.cpu_count() = {os.cpu_count()}"
    )
    rows = [
        ("execute() per query (fresh connection)", bench_single(jobs), None),
        ("single process, cached connection", bench_single_cached(jobs), None),
    ]
    for workers in sorted({1, args.workers}):
        dt, startup = bench_pool(jobs, workers, cache=False)
        rows.append((f"ExecutorPool(workers={workers}), cache off", dt, startup))
    dt, startup = bench_pool(jobs, args.workers, cache=True)
    rows.append((f"ExecutorPool(workers={args.workers}), warm cache", dt, startup))
    print(f"\n{'setting':<44} {'exec/s':>10} {'total s':>9} {'startup s':>10}")
    for name, dt, startup in rows:
        print(f"{name:<44} {len(jobs) / dt:>10.0f} {dt:>9.3f} {'' if startup is None else f'{startup:.2f}':>10}")
    if not args.skip_clause_rewards:
        bench_clause_rewards()


if __name__ == "__main__":
    main()
