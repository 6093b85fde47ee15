"""to_cocte on Spider / BIRD gold SQL: decomposition rates and execution equivalence (Reward-SQL section 4.1,
cold-start conversion; Figure 7 asks for one CTE per logical operation).

For every Spider gold query whose database is present and whose gold executes: convert with
``convert_to_cocte`` (given the database's table columns as ``schema``), check that the result round-trips
through ``split_cocte``, execute both and compare (ordered row lists when the gold query has a top-level
ORDER BY, else multisets of rows; the column count must match). Prints the structured share (no single-CTE
fallback), the >= 2-step share among the queries with a JOIN, WHERE, GROUP BY or sub-query
(``cocte_checks.needs_steps``), the step-count histograms, fallback and single-step reason codes, the
execute-equal count and, with ``--check-steps``, the step checks of ``cocte_checks.step_issues``
(unreferenced CTE, rename-only CTE, a step whose prefix does not execute).

    python benchmarks/cocte_conversion.py [--split dev|train|all] [--limit N] [--check-steps] [--bird]
                                          [--no-schema] [--show-failures K]

``--bird`` also converts the BIRD dev gold SQL (schema from ``dev_tables.json``). No BIRD databases are
shipped, so it reports conversion and step counts, and how many converted queries (and step prefixes) *run*
on empty SQLite databases built from ``dev_tables.json`` wherever the gold query does (catches
name-resolution bugs; says nothing about row equality).
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

from rewardsql_jax.sql.cocte import split_cocte
from rewardsql_jax.sql.cocte_checks import needs_steps, step_issues, table_columns
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


def same_result(a, b, ordered: bool) -> bool:
    if len(a.columns) != len(b.columns):
        return False
    return list(a.rows) == list(b.rows) if ordered else Counter(a.rows) == Counter(b.rows)


class Tally:
    """Counts for one split."""

    def __init__(self):
        self.c, self.steps, self.steps_ops = Counter(), Counter(), Counter()
        self.fallback, self.single, self.issues, self.fails = Counter(), Counter(), Counter(), []

    def add_conversion(self, sql: str, conv) -> None:
        ops = needs_steps(sql)
        self.c["total"] += 1
        self.c["structured"] += not conv.fallback
        self.steps[conv.steps] += 1
        if conv.fallback:
            self.fallback[conv.code] += 1
        if ops:
            self.c["ops"] += 1
            self.c["ops_multi"] += conv.steps >= 2
            self.steps_ops[conv.steps] += 1
            if conv.steps < 2 and not conv.fallback:
                self.single[conv.single_step] += 1

    def report(self, name: str, executed: bool, checked: bool) -> None:
        c, n = self.c, max(self.c["total"], 1)
        print(
            f"{name}: gold queries {n}; structured (no single-CTE fallback) {c['structured']} "
            f"({c['structured'] / n:.2%}); fallback {n - c['structured']} reasons {dict(self.fallback)}"
        )
        print(
            f"  with JOIN/WHERE/GROUP BY/sub-query: {c['ops']}; >= 2 steps {c['ops_multi']} "
            f"({c['ops_multi'] / max(c['ops'], 1):.2%}); structured single-step reasons {dict(self.single)}"
        )
        print(
            f"  steps histogram (all) {dict(sorted(self.steps.items()))}; "
            f"(with JOIN/WHERE/GROUP BY/sub-query) {dict(sorted(self.steps_ops.items()))}"
        )
        if executed:
            print(f"  execute-equal {c['equal']} ({c['equal'] / n:.2%}); differs {c['differs']}, error {c['error']}")
        if checked:
            print(
                f"  step checks: CoCTEs with an issue {c['with_issue']} (with JOIN/WHERE/GROUP BY/sub-query "
                f"{c['ops_with_issue']}); issues {dict(self.issues)}"
            )


def spider_report(pairs, args) -> None:
    t0, tally, skipped = time.perf_counter(), Tally(), 0
    schemas: dict[Path, dict] = {}
    for db, sql in pairs:
        gold = execute(db, sql, timeout_s=30.0)
        if not db.exists() or not gold.ok:
            skipped += 1
            continue
        if db not in schemas:
            schemas[db] = {} if args.no_schema else table_columns(db)
        conv = convert_to_cocte(sql, schema=schemas[db] or None)
        assert split_cocte(conv.sql).steps, sql
        tally.add_conversion(sql, conv)
        res = execute(db, conv.sql, timeout_s=30.0)
        ordered = sqlglot.parse_one(sql, read="sqlite").args.get("order") is not None
        status = "error" if not res.ok else "equal" if same_result(gold, res, ordered) else "differs"
        tally.c[status] += 1
        if status != "equal":
            tally.fails.append((status, sql, f"{res.error}\n{conv.sql}"))
        if args.check_steps:
            issues = step_issues(conv.sql, db)
            tally.issues.update(i.split(":")[0] for i in issues)
            tally.c["with_issue"] += bool(issues)
            tally.c["ops_with_issue"] += bool(issues) and needs_steps(sql)
    print(f"split={args.split} gold queries={len(pairs)} skipped (missing DB / gold error)={skipped}")
    tally.report(f"Spider {args.split}", executed=True, checked=args.check_steps)
    print(f"  elapsed {time.perf_counter() - t0:.1f}s")
    for status, sql, detail in tally.fails[: args.show_failures]:
        print(f"--- {status}: {sql}\n{detail}\n")


def empty_bird_dbs(tmp: Path) -> tuple[dict[str, Path], dict[str, dict]]:
    """Empty SQLite databases with the BIRD dev schemas (tables and typed columns from dev_tables.json), and
    the ``schema`` argument of ``convert_to_cocte`` for each database."""
    dbs, schemas = {}, {}
    for t in json.loads((DATA / "bird" / "dev" / "dev_tables.json").read_text()):
        path = tmp / f"{t['db_id']}.sqlite"
        cols: dict[int, list[tuple[str, str]]] = {}
        for (ti, name), typ in zip(t["column_names_original"], t["column_types"]):
            if ti >= 0:
                cols.setdefault(ti, []).append((name, typ))
        with sqlite3.connect(path) as conn:
            for ti, table in enumerate(t["table_names_original"]):
                typed = [f'"{c}" {typ.upper()}' for c, typ in cols.get(ti, [])] or ["dummy TEXT"]
                conn.execute(f'CREATE TABLE "{table}" ({", ".join(typed)})')
        dbs[t["db_id"]] = path
        schemas[t["db_id"]] = {
            table: [c for c, _ in cols.get(ti, [])] for ti, table in enumerate(t["table_names_original"])
        }
    return dbs, schemas


def bird_report(args) -> None:
    lines = [ln for ln in (DATA / "bird" / "dev" / "dev_gold.sql").read_text().splitlines() if ln.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="bird_empty_"))
    dbs, schemas = empty_bird_dbs(tmp)
    tally, unparsed, gold_runs, both_run = Tally(), 0, 0, 0
    for line in lines:
        sql, db_id = line.rsplit("\t", 1)
        try:
            conv = convert_to_cocte(sql, schema=None if args.no_schema else schemas[db_id])
            split_cocte(conv.sql)
        except ValueError:
            unparsed += 1
            continue
        tally.add_conversion(sql, conv)
        if execute(dbs[db_id], sql).ok:
            gold_runs += 1
            runs = execute(dbs[db_id], conv.sql).ok
            issues = step_issues(conv.sql, dbs[db_id]) if args.check_steps else []
            both_run += runs
            tally.issues.update(i.split(":")[0] for i in issues)
            tally.c["with_issue"] += bool(issues)
            tally.c["ops_with_issue"] += bool(issues) and needs_steps(sql)
    shutil.rmtree(tmp)
    tally.report(
        f"BIRD dev gold ({len(lines)} lines, {unparsed} do not parse)", executed=False, checked=args.check_steps
    )
    print(
        f"  on empty schema DBs: gold runs {gold_runs}, converted also runs {both_run} "
        f"({both_run / max(gold_runs, 1):.2%}); step checks above are on those DBs"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="all", choices=["dev", "train", "all"])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--show-failures", type=int, default=5)
    ap.add_argument("--check-steps", action="store_true", help="run cocte_checks.step_issues on every CoCTE")
    ap.add_argument("--no-schema", action="store_true", help="convert without the databases' table columns")
    ap.add_argument("--bird", action="store_true")
    args = ap.parse_args()
    if args.bird:
        bird_report(args)
    splits = ["dev", "train"] if args.split == "all" else [args.split]
    for split in splits:
        pairs = load(split)
        spider_report(
            pairs[: args.limit] if args.limit else pairs, argparse.Namespace(**{**vars(args), "split": split})
        )


if __name__ == "__main__":
    main()
