"""Shared fixtures for tests/sql: the real benchmark data folder and tiny hand-built SQLite DBs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPIDER_DIR = DATA_DIR / "spider"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path} (expected the shared/data folder beside the repo root)")
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``shared/data`` beside the repository root (skips when absent)."""
    return _need(DATA_DIR)


@pytest.fixture(scope="session")
def spider_dir() -> Path:
    """``shared/data/spider`` (skips when absent)."""
    return _need(SPIDER_DIR)


def load_spider_gold(split: str = "dev") -> list[tuple[str, str, str]]:
    """``[(db_path, gold_sql, db_id)]`` of a Spider gold file, only questions whose DB is present."""
    out = []
    for line in (_need(SPIDER_DIR) / f"{split}_gold.sql").read_text().splitlines():
        if not line.strip():
            continue
        sql, db_id = line.rsplit("\t", 1)
        db = SPIDER_DIR / "database" / db_id / f"{db_id}.sqlite"
        if db.exists():
            out.append((str(db), sql, db_id))
    return out


@pytest.fixture(scope="session")
def spider_dev() -> list[tuple[str, str, str]]:
    """Spider dev gold queries whose database is shipped: [(db_path, gold_sql, db_id)]."""
    return load_spider_gold("dev")


def build_db(path: Path, script: str, rows: dict[str, list[tuple]] | None = None) -> str:
    """Create a SQLite file at ``path`` from a DDL ``script`` plus ``{table: [row, ...]}``."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        for table, values in (rows or {}).items():
            if values:
                marks = ",".join("?" * len(values[0]))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
        conn.commit()
    finally:
        conn.close()
    return str(path)


@pytest.fixture
def make_db(tmp_path):
    """Factory: ``make_db(script, rows=None, name="t.sqlite") -> path`` in a fresh temp dir."""

    def make(script: str, rows: dict[str, list[tuple]] | None = None, name: str = "t.sqlite") -> str:
        return build_db(tmp_path / name, script, rows)

    return make


TINY_SCRIPT = """
CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city TEXT, score REAL);
CREATE TABLE pet (id INTEGER PRIMARY KEY, owner_id INTEGER REFERENCES person(id), kind TEXT, weight REAL);
"""
TINY_ROWS = {
    "person": [
        (1, "Ann", 30, "Oslo", 1.5),
        (2, "Bob", 25, "Rome", 2.0),
        (3, "Cid", 30, "Oslo", None),
        (4, "Dee", None, "Rome", 0.1),
        (5, "Eve", 41, None, 2.0),
    ],
    "pet": [(1, 1, "cat", 4.0), (2, 1, "dog", 12.5), (3, 2, "cat", 3.5), (4, 3, "fish", 0.2), (5, 3, "cat", 4.0)],
}


@pytest.fixture
def tiny_db(tmp_path) -> str:
    """A two-table DB (person, pet) with NULLs, duplicate values and floats."""
    return build_db(tmp_path / "tiny.sqlite", TINY_SCRIPT, TINY_ROWS)
