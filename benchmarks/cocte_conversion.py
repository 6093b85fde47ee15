"""to_cocte success rate on Spider gold SQL (Reward-SQL section 4.1 cold-start conversion).

For every gold query whose database is present: convert with ``convert_to_cocte``, check that the result
round-trips through ``split_cocte``, execute both and compare (ordered row lists when the gold query has a
top-level ORDER BY, else multisets of rows; the column count must match). Prints total, converted,
non-trivial (structured rewrite, not the single-CTE fallback) and execute-equal rates.

    python benchmarks/cocte_conversion.py [--split dev|train|all] [--limit N] [--show-failures K] [--bird]

``--bird`` also converts the BIRD dev gold SQL. No BIRD databases are shipped, so the script builds empty
SQLite databases from ``dev_tables.json`` in a temp dir and reports how many converted queries *compile and
run* wherever the gold query does (catches name-resolution bugs; says nothing about row equality).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path

import sqlglot
from sqlglot import exp

from rewardsql_jax.sql.cocte import split_cocte
from rewardsql_jax.sql.execute import execute
from rewardsql_jax.sql.to_cocte import convert_to_cocte

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load(split: str) -> list[tuple[Path, str]]:
    """(db_path, gold_sql) pairs of Spider dev (dev_gold.sql) and/or train (spider_syn/train_spider.json)."""
    out = []
    if split in ("dev", "all"):
        for line in (DATA / "spider" / "dev_gold.sql").read_text().splitlines():
            if line.strip():
                sql, db = line.rsplit("\t", 1)
                out.append((DATA / "spider" / "database" / db / f"{db}.sqlite", sql))
    if split in ("train", "all"):
        for d in json.loads((DATA / "spider_syn" / "train_spider.json").read_text()):
            out.append((DATA / "spider" / "database" / d["db_id"] / f"{d['db_id']}.sqlite", d["query"]))
    return out


def has_top_order(sql: str) -> bool:
    tree = sqlglot.parse_one(sql, read="sqlite")
    return tree.args.get("order") is not None


def same_result(a, b, ordered: bool) -> bool:
    if len(a.columns) != len(b.columns):
        return False
    return list(a.rows) == list(b.rows) if ordered else Counter(a.rows) == Counter(b.rows)


def check(db: Path, sql: str) -> tuple[str, bool, str]:
    """-> (status, fallback, detail); status: 'equal' | 'differs' | 'error' | 'noconvert' | 'skip'."""
    gold = execute(db, sql, timeout_s=30.0)
    if not db.exists() or not gold.ok:
        return "skip", False, gold.error or ""
    try:
        conv = convert_to_cocte(sql)
        steps = split_cocte(conv.sql).steps
        assert steps, "no steps"
    except Exception as e:  # noqa: BLE001 -- counted and reported
        return "noconvert", False, repr(e)
    res = execute(db, conv.sql, timeout_s=30.0)
    if not res.ok:
        return "error", conv.fallback, f"{res.error}\n{conv.sql}"
    ok = same_result(gold, res, has_top_order(sql))
    return ("equal" if ok else "differs"), conv.fallback, "" if ok else conv.sql


def empty_bird_dbs(tmp: Path) -> dict[str, Path]:
    """Empty SQLite databases with the BIRD dev schemas (tables and typed columns from dev_tables.json)."""
    out = {}
    for t in json.loads((DATA / "bird" / "dev" / "dev_tables.json").read_text()):
        path = tmp / f"{t['db_id']}.sqlite"
        cols: dict[int, list[str]] = {}
        for (ti, name), typ in zip(t["column_names_original"], t["column_types"]):
            if ti >= 0:
                cols.setdefault(ti, []).append(f'"{name}" {typ.upper()}')
        with sqlite3.connect(path) as conn:
            for ti, table in enumerate(t["table_names_original"]):
                conn.execute(f'CREATE TABLE "{table}" ({", ".join(cols.get(ti, ["dummy TEXT"]))})')
        out[t["db_id"]] = path
    return out


def bird_report() -> None:
    lines = [ln for ln in (DATA / "bird" / "dev" / "dev_gold.sql").read_text().splitlines() if ln.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="bird_empty_"))
    dbs = empty_bird_dbs(tmp)
    ok = fallback = gold_runs = both_run = 0
    reasons, steps = Counter(), Counter()
    for line in lines:
        sql, db_id = line.rsplit("\t", 1)
        try:
            conv = convert_to_cocte(sql)
            n = len(split_cocte(conv.sql).steps)
        except ValueError as e:
            reasons[f"ValueError: {str(e)[:50]}"] += 1
            continue
        ok += 1
        steps[n] += 1
        if conv.fallback:
            fallback += 1
            reasons[conv.reason[:60]] += 1
        if execute(dbs[db_id], sql).ok:
            gold_runs += 1
            res = execute(dbs[db_id], conv.sql)
            both_run += res.ok
            if not res.ok:
                reasons[f"converted fails on empty DB: {res.error[:40]}"] += 1
    shutil.rmtree(tmp)
    print(f"BIRD dev gold on empty schema DBs: gold runs {gold_runs}, converted also runs {both_run} "
          f"({both_run / max(gold_runs, 1):.2%})")
    print(f"BIRD dev gold: {len(lines)}; converted + round-trip {ok} ({ok / len(lines):.2%}); "
          f"fallback {fallback} ({fallback / len(lines):.2%}); steps histogram {dict(sorted(steps.items()))}")
    print(f"  fallback / failure reasons: {dict(reasons.most_common(8))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="all", choices=["dev", "train", "all"])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--show-failures", type=int, default=5)
    ap.add_argument("--bird", action="store_true")
    args = ap.parse_args()
    if args.bird:
        bird_report()
    pairs = load(args.split)
    if args.limit:
        pairs = pairs[:args.limit]
    t0 = time.perf_counter()
    counts, fallbacks, fails = Counter(), 0, []
    reasons, steps = Counter(), Counter()
    for db, sql in pairs:
        status, fb, detail = check(db, sql)
        counts[status] += 1
        if status != "skip":
            steps[len(split_cocte(convert_to_cocte(sql).sql).steps)] += 1
        if status != "skip" and fb:
            fallbacks += 1
            reasons[convert_to_cocte(sql).reason.split(".")[0][:60]] += 1
        if status in ("differs", "error", "noconvert"):
            fails.append((status, sql, detail))
    total = sum(v for k, v in counts.items() if k != "skip")
    converted = total - counts["noconvert"]
    print(f"split={args.split} gold queries={len(pairs)} skipped (missing DB / gold error)={counts['skip']}")
    print(f"total executable gold: {total}")
    print(f"converted + round-trips split_cocte: {converted} ({converted / total:.2%})")
    print(f"non-trivial (structured, not fallback): {converted - fallbacks} ({(converted - fallbacks) / total:.2%})")
    print(f"fallback (single CTE): {fallbacks} ({fallbacks / total:.2%})  reasons: {dict(reasons.most_common(8))}")
    print(f"execute-equal: {counts['equal']} ({counts['equal'] / total:.2%}); differs {counts['differs']}, "
          f"error {counts['error']}")
    print(f"steps per CoCTE histogram: {dict(sorted(steps.items()))}")
    print(f"elapsed {time.perf_counter() - t0:.1f}s")
    for status, sql, detail in fails[:args.show_failures]:
        print(f"--- {status}: {sql}\n{detail}\n")


if __name__ == "__main__":
    main()
