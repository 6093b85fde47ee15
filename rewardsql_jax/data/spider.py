"""Spider-family loader (official Spider layout; also Spider-Syn / Spider-DK / Spider-Realistic files).

Layout under `root`:
    dev.json (or any question file)   [{"db_id", "question" | "SpiderQuestion", "query", "sql"?}, ...]
    tables.json                        schema annotations (names, primary/foreign keys)
    database/<db_id>/<db_id>.sqlite

Spider has no difficulty field: the official hardness (easy/medium/hard/extra) is computed from
the `sql` tree when the file has one, else approximated from the SQL text (see spider_hardness).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.layout import assemble, read_json_list, require_path, resolve_file
from rewardsql_jax.data.spider_hardness import approx_spider_hardness, spider_hardness

QUESTION_FIELDS = ("question", "SpiderQuestion")
_HINT = (
    "Point root at an unpacked Spider folder (dev.json, tables.json, database/<db>/<db>.sqlite), "
    "e.g. ../shared/data/spider."
)


def _question_field(row: dict, field: str | None) -> str:
    if field is not None:
        if field not in row:
            raise KeyError(f"question field {field!r} not in Spider row with keys {sorted(row)}")
        return field
    for name in QUESTION_FIELDS:
        if name in row:
            return name
    raise KeyError(f"Spider row has none of the question fields {QUESTION_FIELDS}: keys {sorted(row)}")


def _approx_or_unknown(sql: str) -> str:
    try:
        return approx_spider_hardness(sql)
    except ValueError:
        return "unknown"


def load_spider(
    root: str | Path,
    *,
    questions: str | Path = "dev.json",
    db_dir: str | Path | Sequence[str | Path] = "database",
    question_field: str | None = None,
    require_db: bool = True,
    on_missing: str = "skip",
    limit: int | None = None,
    db_ids: Iterable[str] | str | None = None,
    name: str | None = None,
) -> Benchmark:
    """Load a Spider-layout question file into a Benchmark.

    `questions` and `db_dir` are relative to `root` unless absolute (so Spider-Syn's
    train_spider.json can be read against spider/database). `db_dir` may list several folders,
    searched in order (Spider-DK: its own database/ first, then Spider's). `question_field` picks the text
    field ("question", "SpiderQuestion", "SpiderSynQuestion"; default: the first of
    QUESTION_FIELDS present). `require_db`, `on_missing`, `limit`, `db_ids`: see layout.assemble.
    question_id is the row index in the file. Hardness is "unknown" when a file without `sql`
    trees has a gold query sqlglot cannot parse (Spider-DK #76 has such a typo).
    """
    root = require_path(Path(root), "Spider data folder", _HINT)
    qfile = require_path(resolve_file(root, questions), "Spider question file", _HINT)
    dirs = [db_dir] if isinstance(db_dir, (str, Path)) else list(db_dir)
    db_roots = tuple(require_path(resolve_file(root, d), "Spider database folder", _HINT) for d in dirs)
    rows = read_json_list(qfile)

    def to_example(index: int, row: dict, db_path: str) -> Example:
        gold = row.get("query")
        if not gold:
            raise ValueError(f"{qfile}: question #{index} has no 'query' (gold SQL)")
        level = spider_hardness(row["sql"]) if isinstance(row.get("sql"), dict) else _approx_or_unknown(gold)
        return Example(
            question_id=index,
            db_id=row["db_id"],
            question=row[_question_field(row, question_field)],
            evidence="",
            gold_sql=gold,
            difficulty=level,
            db_path=db_path,
        )

    return assemble(
        name or f"spider:{qfile.parent.name}/{qfile.stem}",
        rows,
        to_example,
        db_roots,
        require_db=require_db,
        on_missing=on_missing,
        limit=limit,
        db_ids=db_ids,
    )


@lru_cache(maxsize=8)
def _tables_json(path: str) -> dict[str, dict]:
    with open(path, encoding="utf-8") as f:
        return {entry["db_id"]: entry for entry in json.load(f)}


def load_spider_tables(root: str | Path, tables: str | Path = "tables.json") -> dict[str, dict]:
    """Read Spider's tables.json into {db_id: entry} (entries as in the file; cached per path)."""
    root = Path(root)
    path = require_path(resolve_file(root, tables), "Spider tables.json", _HINT)
    return _tables_json(str(path.resolve()))
