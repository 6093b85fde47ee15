"""Shared helpers of the benchmark loaders: locating files, reading question JSON, resolving databases."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from rewardsql_jax.data.examples import Benchmark, Example

ON_MISSING = ("skip", "raise")


class MissingDatabaseError(FileNotFoundError):
    """A question refers to a db_id whose SQLite file is not where the layout says it is."""


def require_path(path: Path, what: str, hint: str) -> Path:
    """Return `path` if it exists, else raise FileNotFoundError naming `what` and how to fix it."""
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}. {hint}")
    return path


def resolve_file(root: Path, name: str | Path) -> Path:
    """`name` if absolute, else `root / name`."""
    name = Path(name)
    return name if name.is_absolute() else root / name


def read_json_list(path: Path) -> list[dict]:
    """Read a question file: a JSON array of objects."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path} must hold a JSON array of question objects")
    return data


def sqlite_path(db_root: Path, db_id: str) -> Path:
    """Official Spider/BIRD layout: `<db_root>/<db_id>/<db_id>.sqlite`."""
    return db_root / db_id / f"{db_id}.sqlite"


def find_sqlite(db_roots: tuple[Path, ...], db_id: str) -> Path:
    """The first `<root>/<db_id>/<db_id>.sqlite` that exists, else the expected path under the first root."""
    for root in db_roots:
        path = sqlite_path(root, db_id)
        if path.is_file():
            return path
    return sqlite_path(db_roots[0], db_id)


def assemble(
    name: str,
    rows: Iterable[dict],
    to_example: Callable[[int, dict, str], Example],
    db_roots: Path | tuple[Path, ...],
    *,
    require_db: bool,
    on_missing: str,
    limit: int | None,
    db_ids: Iterable[str] | None,
) -> Benchmark:
    """Filter rows by db, check their databases, convert them, and count what was skipped.

    `to_example(index, row, db_path)` builds one Example. With `require_db` a question whose
    database file is absent is skipped (`on_missing="skip"`, counted in `n_skipped`) or raises
    MissingDatabaseError naming the db and its expected path (`on_missing="raise"`).
    `limit` applies after filtering and skipping. With several `db_roots` (e.g. Spider-DK's own
    folder, then Spider's) a database is taken from the first root holding it.
    """
    db_roots = (db_roots,) if isinstance(db_roots, Path) else tuple(db_roots)
    if on_missing not in ON_MISSING:
        raise ValueError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    wanted = None if db_ids is None else set([db_ids] if isinstance(db_ids, str) else db_ids)
    examples: list = []
    missing, n_skipped, paths = {}, 0, {}
    for index, row in enumerate(rows):
        db_id = row.get("db_id")
        if not db_id:
            raise ValueError(f"{name}: question #{index} has no db_id")
        if wanted is not None and db_id not in wanted:
            continue
        if db_id not in paths:
            paths[db_id] = find_sqlite(db_roots, db_id)
            if not paths[db_id].is_file():
                missing[db_id] = paths[db_id]
        path = paths[db_id]
        if db_id in missing:
            if require_db:
                if on_missing == "raise":
                    where = " or ".join(str(sqlite_path(r, db_id)) for r in db_roots)
                    raise MissingDatabaseError(
                        f"{name}: database '{db_id}' is missing: expected {where}. Put the SQLite file there, "
                        f"load with on_missing='skip' to drop its questions, or require_db=False to keep them."
                    )
                n_skipped += 1
                continue
        if limit is not None and len(examples) >= limit:
            break
        examples.append(to_example(index, row, str(path)))
    return Benchmark(
        name=name,
        examples=tuple(examples),
        db_root=str(db_roots[0]),
        missing_dbs=tuple(sorted(missing)),
        n_skipped=n_skipped,
    )
