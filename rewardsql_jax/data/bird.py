"""BIRD loader (official layout) and its column-description CSVs.

Layout under `root` (e.g. the unpacked dev or train folder):
    <split>.json                       [{"question_id"?, "db_id", "question", "evidence", "SQL", "difficulty"?}, ...]
    <split>_databases/<db_id>/<db_id>.sqlite
    <split>_databases/<db_id>/database_description/<table>.csv
        (original_column_name, column_name, column_description, data_format, value_description)

BIRD train.json has no question_id nor difficulty: the row index and "unknown" stand in.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.layout import assemble, read_json_list, require_path, resolve_file

BIRD_DIFFICULTIES = ("simple", "moderate", "challenging")
_HINT = (
    "Point root at an unpacked BIRD split folder (dev.json, dev_databases/<db>/<db>.sqlite), "
    "e.g. ../shared/data/bird/dev."
)


def load_bird(
    root: str | Path,
    *,
    split: str = "dev",
    questions: str | Path | None = None,
    db_dir: str | Path | None = None,
    require_db: bool = True,
    on_missing: str = "skip",
    limit: int | None = None,
    db_ids: Iterable[str] | str | None = None,
    name: str | None = None,
) -> Benchmark:
    """Load a BIRD-layout question file into a Benchmark.

    Defaults follow the official layout: `<split>.json` and `<split>_databases/` under `root`
    (override with `questions` / `db_dir`, e.g. mini-dev's mini_dev_sqlite.json).
    `require_db`, `on_missing`, `limit`, `db_ids`: see layout.assemble.
    """
    root = require_path(Path(root), "BIRD data folder", _HINT)
    qfile = require_path(resolve_file(root, questions or f"{split}.json"), "BIRD question file", _HINT)
    db_root = require_path(resolve_file(root, db_dir or f"{split}_databases"), "BIRD database folder", _HINT)
    rows = read_json_list(qfile)

    def to_example(index: int, row: dict, db_path: str) -> Example:
        gold = row.get("SQL") or row.get("query")
        if not gold:
            raise ValueError(f"{qfile}: question #{index} has no 'SQL' (gold SQL)")
        return Example(
            question_id=int(row.get("question_id", index)),
            db_id=row["db_id"],
            question=row["question"],
            evidence=row.get("evidence") or "",
            gold_sql=gold,
            difficulty=row.get("difficulty") or "unknown",
            db_path=db_path,
        )

    return assemble(
        name or f"bird:{qfile.stem}",
        rows,
        to_example,
        db_root,
        require_db=require_db,
        on_missing=on_missing,
        limit=limit,
        db_ids=db_ids,
    )


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # A few official BIRD CSVs (e.g. european_football_2, formula_1) are Windows-1252.
        return raw.decode("cp1252", errors="replace")


def _clean(text: str | None) -> str:
    return " ".join((text or "").split())


def read_bird_descriptions(db_dir: str | Path, *, with_values: bool = False) -> dict[tuple[str, str], str]:
    """Column descriptions of one BIRD database: {(table.lower(), column.lower()): text}.

    `db_dir` is `<split>_databases/<db_id>` (i.e. `Path(example.db_path).parent`); tables are the
    CSV file stems. The text is `column_description` with whitespace collapsed; with
    `with_values` the `value_description` is appended after "; ". Columns with no description
    are left out. Returns {} when the database has no database_description folder. Cached per
    folder, so calling it once per question is cheap.
    """
    folder = Path(db_dir) / "database_description"
    if not folder.is_dir():
        return {}
    return dict(_descriptions(str(folder.resolve()), with_values))


@lru_cache(maxsize=64)
def _descriptions(folder: str, with_values: bool) -> tuple[tuple[tuple[str, str], str], ...]:
    out: dict[tuple[str, str], str] = {}
    for csv_path in sorted(Path(folder).glob("*.csv")):
        for row in csv.DictReader(io.StringIO(_read_text(csv_path))):
            column = _clean(row.get("original_column_name"))
            text = _clean(row.get("column_description"))
            values = _clean(row.get("value_description"))
            if with_values and values:
                text = f"{text}; {values}" if text else values
            if column and text:
                out[(csv_path.stem.lower(), column.lower())] = text
    return tuple(out.items())


def bird_descriptions_for(benchmark: Benchmark, db_id: str, **kwargs) -> Mapping[tuple[str, str], str]:
    """read_bird_descriptions for `db_id` under the benchmark's database folder."""
    return read_bird_descriptions(Path(benchmark.db_root) / db_id, **kwargs)
