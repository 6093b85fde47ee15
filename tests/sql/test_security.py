"""A generated query must never change a database file, escape the sandbox or run forever."""

from __future__ import annotations

import hashlib
import os
import shutil
import time

import pytest

from rewardsql_jax.sql import execute


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def spider_copy(spider_dir, tmp_path):
    """A private copy of a real Spider DB (concert_singer), so an escape could not hurt shared data."""
    src = spider_dir / "database" / "concert_singer" / "concert_singer.sqlite"
    dst = tmp_path / "concert_singer.sqlite"
    shutil.copy(src, dst)
    return dst


ATTACKS = [
    # (sql, words the error must contain)
    ("DROP TABLE singer", ["DROP", "read-only"]),
    ("DELETE FROM singer", ["DELETE", "read-only"]),
    ("UPDATE singer SET Age = 0", ["UPDATE", "read-only"]),
    ("INSERT INTO singer (Singer_ID, Name) VALUES (99, 'x')", ["INSERT", "read-only"]),
    ("REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')", ["REPLACE", "read-only"]),
    ("CREATE TABLE evil (x)", ["CREATE", "read-only"]),
    ("ALTER TABLE singer RENAME TO s2", ["ALTER", "read-only"]),
    ("ATTACH DATABASE '{tmp}/attached.db' AS evil", ["ATTACH", "read-only"]),
    ("DETACH DATABASE main", ["DETACH", "read-only"]),
    ("PRAGMA writable_schema=ON", ["PRAGMA", "read-only"]),
    ("PRAGMA journal_mode=DELETE", ["PRAGMA", "read-only"]),
    ("VACUUM", ["VACUUM", "read-only"]),
    ("VACUUM INTO '{tmp}/copy.db'", ["VACUUM", "read-only"]),
    ("BEGIN EXCLUSIVE", ["BEGIN", "read-only"]),
    ("SELECT load_extension('{tmp}/evil.so')", ["not authorized", "load_extension"]),
    ("SELECT * FROM pragma_writable_schema", ["not authorized", "writable_schema"]),
    # The statement filter lets WITH through; the authorizer must stop the write inside it.
    ("WITH x AS (SELECT 1) DELETE FROM singer", ["not authorized", "DELETE", "read-only"]),
    ("WITH x AS (SELECT 1) UPDATE singer SET Age = 0", ["not authorized", "UPDATE", "read-only"]),
    ("WITH x AS (SELECT 1) INSERT INTO singer (Singer_ID) SELECT 100", ["not authorized", "INSERT", "read-only"]),
    ("WITH x AS (SELECT 1) UPDATE sqlite_master SET sql = 'x'", ["may not be modified"]),
    ("SELECT 1; DROP TABLE singer", ["one statement"]),
    ("SELECT 1;\nPRAGMA writable_schema=ON", ["one statement"]),
]


@pytest.mark.parametrize("sql, needles", ATTACKS, ids=[a[0][:40] for a in ATTACKS])
def test_attack_fails_and_file_is_unchanged(spider_copy, tmp_path, sql, needles):
    sql = sql.format(tmp=tmp_path)
    before = _sha256(spider_copy)
    r = execute(spider_copy, sql)
    assert not r.ok, sql
    for needle in needles:
        assert needle.lower() in r.error.lower(), (sql, r.error)
    assert _sha256(spider_copy) == before
    assert execute(spider_copy, "SELECT count(*) FROM singer").rows == ((6,),)
    # No side files: nothing attached, copied, or left behind (a -journal/-wal would mean a write).
    assert sorted(os.listdir(tmp_path)) == ["concert_singer.sqlite"]


def test_introspection_still_works(spider_copy):
    # Read-only table-valued functions must run (official evaluators would run them).
    assert execute(spider_copy, "SELECT name FROM pragma_table_info('singer') WHERE pk = 1").rows == (("Singer_ID",),)
    assert execute(spider_copy, "SELECT count(*) FROM sqlite_master WHERE type = 'table'").ok
    assert execute(spider_copy, "SELECT value FROM json_each('[1,2]')").rows == ((1,), (2,))


RUNAWAYS = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    # 6^16 ~ 2.8e12 rows
    "SELECT count(*) FROM " + ", ".join(f"singer s{i}" for i in range(16)),
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY x DESC LIMIT 1",
]


@pytest.mark.parametrize("sql", RUNAWAYS, ids=["recursive", "cross_join_1e12", "recursive_sort"])
def test_runaway_query_stops_within_timeout_plus_one_second(spider_copy, sql):
    before = _sha256(spider_copy)
    timeout = 1.0
    start = time.monotonic()
    r = execute(spider_copy, sql, timeout_s=timeout)
    elapsed = time.monotonic() - start
    assert r.timed_out and not r.ok and "timed out" in r.error
    # Correctness bound from the issue (a deadline, not a speed benchmark).
    assert elapsed < timeout + 1.0, elapsed
    assert _sha256(spider_copy) == before
