"""execute(): results, caps, text decoding and bad input (all as error results, never exceptions)."""

from __future__ import annotations

import sqlite3

import pytest

from rewardsql_jax.sql import ExecResult, execute
from rewardsql_jax.sql.execute import connect_readonly, run_query


def test_rows_columns_and_types(tiny_db):
    r = execute(tiny_db, "SELECT name, age, score FROM person WHERE city = 'Oslo' ORDER BY id")
    assert r == ExecResult(ok=True, columns=("name", "age", "score"), rows=(("Ann", 30, 1.5), ("Cid", 30, None)))
    assert isinstance(r.rows, tuple) and all(isinstance(row, tuple) for row in r.rows)


def test_matches_plain_sqlite_on_spider_dev(spider_dev):
    # The sandbox must not change any result: compare with an unsandboxed connection.
    for db, sql, _ in spider_dev[::7]:
        conn = sqlite3.connect(db)
        try:
            expected = conn.execute(sql).fetchall()
        finally:
            conn.close()
        r = execute(db, sql)
        assert r.ok, (sql, r.error)
        assert list(r.rows) == expected, sql


def test_result_is_frozen(tiny_db):
    r = execute(tiny_db, "SELECT 1")
    with pytest.raises(AttributeError):
        r.ok = False  # type: ignore[misc]


def test_sql_error_keeps_sqlite_message(tiny_db):
    assert execute(tiny_db, "SELECT nope FROM person").error == "no such column: nope"
    assert execute(tiny_db, "SELECT * FROM nope").error == "no such table: nope"
    r = execute(tiny_db, "SELEC 1")
    assert not r.ok and "syntax error" in r.error and not r.timed_out


def test_trailing_semicolon_and_comments_are_one_statement(tiny_db):
    assert execute(tiny_db, "-- lead\nSELECT count(*) FROM pet; -- tail").rows == ((5,),)
    assert execute(tiny_db, "/* c */ WITH x AS (SELECT 2) SELECT * FROM x;").rows == ((2,),)
    assert execute(tiny_db, "VALUES (1, 'a')").rows == ((1, "a"),)


def test_multiple_statements_rejected(tiny_db):
    r = execute(tiny_db, "SELECT 1; SELECT 2")
    assert not r.ok and "one statement" in r.error


def test_max_rows_is_an_error_not_a_truncation(tiny_db):
    assert execute(tiny_db, "SELECT * FROM pet", max_rows=5).ok
    r = execute(tiny_db, "SELECT * FROM pet", max_rows=4)
    assert not r.ok and "max_rows=4" in r.error and r.rows == ()


def test_max_result_bytes(tiny_db):
    big = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 3000) SELECT printf('%.500c', 'x') FROM c"
    assert execute(tiny_db, big).ok
    r = execute(tiny_db, big, max_result_bytes=100_000)
    assert not r.ok and "max_result_bytes" in r.error


def test_max_value_bytes_caps_strings_sqlite_builds(tiny_db):
    r = execute(tiny_db, "SELECT length(randomblob(2000000))", max_value_bytes=1_000_000)
    assert not r.ok and "too big" in r.error
    assert execute(tiny_db, "SELECT length(randomblob(2000000))").rows == ((2000000,),)


def test_text_decoding_modes(make_db):
    db = make_db("CREATE TABLE t (s TEXT);")
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO t VALUES (CAST(X'61FF62' AS TEXT))")  # 'a', invalid byte, 'b'
    conn.commit()
    conn.close()
    strict = execute(db, "SELECT s FROM t")
    assert not strict.ok and "decode" in strict.error.lower()  # Python's default text_factory, as BIRD's evaluator
    assert execute(db, "SELECT s FROM t", text_errors="ignore").rows == (("ab",),)  # Spider test-suite
    assert execute(db, "SELECT s FROM t", text_errors="replace").rows == (("a\ufffdb",),)
    assert "text_errors" in execute(db, "SELECT 1", text_errors="bogus").error


@pytest.mark.parametrize(
    "sql, needle",
    [
        ("", "empty SQL"),
        ("   \n\t", "empty SQL"),
        ("-- only a comment", "empty SQL"),
        ("/* x */ -- y", "empty SQL"),
        (b"SELECT '\xff'", "not valid UTF-8"),
        ("SELECT '\udcff'", "not valid UTF-8"),
        ("SELECT 1 \x00", "NUL"),
        ("SELECT " + "1+" * 600_000 + "1", "max_sql_chars"),
        (None, "must be a str"),
        (42, "must be a str"),
    ],
)
def test_bad_sql_is_an_error_result(tiny_db, sql, needle):
    r = execute(tiny_db, sql)
    assert isinstance(r, ExecResult) and not r.ok and needle in r.error


def test_one_megabyte_sql_string(tiny_db):
    sql = "SELECT 1" + " " * (1 << 20)
    r = execute(tiny_db, sql)
    assert not r.ok and "max_sql_chars" in r.error
    assert execute(tiny_db, sql, max_sql_chars=2 << 20).rows == ((1,),)


def test_utf8_bytes_sql_is_accepted(tiny_db):
    assert execute(tiny_db, "SELECT 'é'".encode()).rows == (("é",),)


def test_bad_database_paths(tmp_path):
    missing = execute(tmp_path / "missing.sqlite", "SELECT 1")
    assert not missing.ok and "database file not found" in missing.error
    assert not (tmp_path / "missing.sqlite").exists()  # mode=ro never creates a file
    assert "database file not found" in execute(tmp_path, "SELECT 1").error
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    r = execute(junk, "SELECT 1 FROM t")
    assert not r.ok and "not a database" in r.error
    assert not execute(None, "SELECT 1").ok


def test_connection_reuse_resets_state(tiny_db):
    conn = connect_readonly(tiny_db)
    try:
        first = run_query(
            conn, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", timeout_s=0.2
        )
        assert first.timed_out
        denied = run_query(conn, "SELECT load_extension('x')")
        assert "load_extension" in denied.error
        ok = run_query(conn, "SELECT count(*) FROM person")  # no stale deadline or denial reason
        assert ok == ExecResult(ok=True, columns=("count(*)",), rows=((5,),))
        assert run_query(conn, "SELECT nope").error == "no such column: nope"
    finally:
        conn.close()


def test_path_with_uri_special_characters(tmp_path, make_db):
    weird = tmp_path / "we ird?#%"
    weird.mkdir()
    db = make_db("CREATE TABLE t (x); INSERT INTO t VALUES (7);", name="we ird?#%/d b.sqlite")
    assert execute(db, "SELECT x FROM t").rows == ((7,),)
