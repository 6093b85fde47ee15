"""to_cocte success rate on Spider gold SQL (Reward-SQL section 4.1 cold-start conversion).

For every gold query whose database is present: convert with ``convert_to_cocte``, check that the result
round-trips through ``split_cocte``, execute both and compare (ordered row lists when the gold query has a
top-level ORDER BY, else multisets of rows; the column count must match). Prints total, converted,
non-trivial (structured rewrite, not the single-CTE fallback) and execute-equal rates.

    python benchmarks/cocte_conversion.py [--split dev|train|all] [--limit N] [--show-failures K]
"""
from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="all", choices=["dev", "train", "all"])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--show-failures", type=int, default=5)
    args = ap.parse_args()
    pairs = load(args.split)
    if args.limit:
        pairs = pairs[:args.limit]
    t0 = time.perf_counter()
    counts, fallbacks, fails = Counter(), 0, []
    reasons = Counter()
    for db, sql in pairs:
        status, fb, detail = check(db, sql)
        counts[status] += 1
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
    print(f"elapsed {time.perf_counter() - t0:.1f}s")
    for status, sql, detail in fails[:args.show_failures]:
        print(f"--- {status}: {sql}\n{detail}\n")


if __name__ == "__main__":
    main()
