"""M-Schema text: a golden string for a hand-made DB, and a real Spider DB checked against its own DDL."""

import sqlite3
from pathlib import Path

import pytest

from rewardsql_jax.data import MSchemaOptions, load_spider_tables, m_schema, read_db_schema
from rewardsql_jax.data.schema import connect_readonly

from tiny_db import TINY_DESCRIPTIONS, TINY_GOLDEN, make_tiny_db

SPIDER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "spider"


def test_golden_tiny_db(tmp_path):
    # One example for DATE columns and when a value exceeds 20 chars; none for e-mails;
    # NULL and '' never shown; description between type and the rest (XiYan's order).
    path = make_tiny_db(tmp_path)
    assert m_schema(path, descriptions=TINY_DESCRIPTIONS) == TINY_GOLDEN


def test_options_and_cache_invalidation(tmp_path):
    path = make_tiny_db(tmp_path)
    text = m_schema(path, options=MSchemaOptions(example_num=0))
    assert "Examples" not in text and "(id:INTEGER, Primary Key)" in text
    assert (
        m_schema(path, options=MSchemaOptions(long_example_len=50)).count(
            "Examples: [Strong defender, Captain since 2019, known for long passes]"
        )
        == 1
    )
    before = read_db_schema(path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE coach (coach_id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    assert [t.name for t in read_db_schema(path).tables] == ["team", "player", "coach"]
    assert [t.name for t in before.tables] == ["team", "player"]


def test_readonly_and_missing_file(tmp_path):
    path = make_tiny_db(tmp_path)
    conn = connect_readonly(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM team")
    conn.close()
    with pytest.raises(FileNotFoundError, match="SQLite database not found"):
        m_schema(tmp_path / "none.sqlite")


@pytest.mark.skipif(
    not (SPIDER / "database" / "concert_singer").is_dir(), reason=f"real Spider data not found at {SPIDER}"
)
def test_real_spider_db_matches_its_ddl():
    path = SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"
    text = m_schema(path, tables_entry=load_spider_tables(SPIDER)["concert_singer"])
    lines = text.split("\n")
    assert lines[0] == "【DB_ID】 concert_singer"
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["stadium", "singer", "concert", "singer_in_concert"]
    assert [line[len("# Table: ") :] for line in lines if line.startswith("# Table: ")] == tables
    field_lines = [line for line in lines if line.startswith("(")]
    expected_fields = []
    for t in tables:
        for _, name, decl, _, _, pk in conn.execute(f'PRAGMA table_info("{t}")'):
            expected_fields.append((name, decl.upper(), bool(pk)))
    assert len(field_lines) == len(expected_fields) == 21
    for line, (name, decl, pk) in zip(field_lines, expected_fields):
        assert line.startswith(f"({name}:{decl}")
        assert (", Primary Key" in line) == pk
        assert line.rstrip(",").endswith(")")
    fk_lines = lines[lines.index("【Foreign keys】") + 1 :]
    assert set(fk_lines) == {
        "concert.Stadium_ID=stadium.Stadium_ID",
        "singer_in_concert.concert_ID=concert.concert_ID",
        "singer_in_concert.Singer_ID=singer.Singer_ID",
    }
    assert "(Country:TEXT, Examples: [Netherlands, United States, France])" in field_lines[9]


@pytest.mark.skipif(not (SPIDER / "database").is_dir(), reason=f"real Spider data not found at {SPIDER}")
def test_every_spider_db_renders():
    tables = load_spider_tables(SPIDER)
    for db in sorted(p for p in (SPIDER / "database").iterdir() if (p / f"{p.name}.sqlite").is_file()):
        text = m_schema(db / f"{db.name}.sqlite", tables_entry=tables[db.name])
        n_tables = (
            sqlite3.connect(db / f"{db.name}.sqlite")
            .execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
            .fetchone()[0]
        )
        assert text.count("\n# Table: ") == n_tables, db.name
