"""Sandboxed, read-only SQLite execution of one generated query (Reward-SQL 5.1/6.1, EXPO-SQL 3.2).

Every reward in the three papers comes from executing model-written SQL against a benchmark
database. A generated query must never change or damage that database, must not run forever and
must not exhaust memory. The defences, outermost first:

1. The file is opened through the URI ``file:...?mode=ro`` (SQLite refuses every write at the
   pager level) and ``PRAGMA query_only=ON`` is set.
2. Statements that start with a keyword other than ``SELECT``, ``WITH`` or ``VALUES`` (DROP,
   PRAGMA, VACUUM, ...) are refused before SQLite sees them, so that statements the authorizer
   cannot see (``VACUUM INTO 'file'``) never run.
3. An authorizer *allow-list* permits only reads, SELECT, recursive CTEs, functions other than
   ``load_extension`` (and the CLI file functions), and a few introspection pragmas
   (``PRAGMA table_info(t)`` ...). Everything else — INSERT/UPDATE/DELETE, CREATE/DROP/ALTER,
   ATTACH/DETACH, transactions, pragma writes such as ``writable_schema`` — is denied with a
   message that says why. Extension loading is also switched off on the connection.
4. A progress handler checks a wall-clock deadline every 1000 virtual-machine steps; a runaway
   query (an infinite ``WITH RECURSIVE``, a 10^12-row cross join) is interrupted and reported
   with ``timed_out=True`` shortly after ``timeout_s``.
5. Memory: ``max_rows`` caps the number of result rows, ``max_result_bytes`` caps the estimated
   size of the fetched rows, and ``SQLITE_LIMIT_LENGTH`` (``max_value_bytes``) caps any single
   string/blob SQLite may build (``printf('%.*c', 1e9, 'x')``). The process-wide
   ``PRAGMA hard_heap_limit`` is applied only inside :class:`ExecutorPool` workers (see
   ``pool.py``), because it would also bind unrelated SQLite users of a caller's process.
   Going over a cap is an error result, never a silently truncated one, so a comparison can
   never call a truncated result correct.

Text decoding follows the official evaluators: ``text_errors="strict"`` is Python's default
``text_factory=str`` (used by the BIRD evaluator; undecodable text becomes an error result);
``"ignore"`` is ``bytes.decode(errors="ignore")`` as in the Spider test-suite evaluator;
``"replace"`` is also accepted.

No exception ever escapes :func:`execute`: bad input (missing file, empty SQL, several
statements, non-UTF-8 text, oversized SQL) comes back as ``ExecResult(ok=False, error=...)``.
SQL errors carry SQLite's own message unchanged (EXPO-SQL parses them).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import sqlite3
import time

DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_RESULT_BYTES = 256 * 2**20
DEFAULT_MAX_VALUE_BYTES = 64 * 2**20
DEFAULT_MAX_SQL_CHARS = 100_000
TEXT_ERRORS = ("strict", "ignore", "replace")
_PROGRESS_STEPS = 1000
_FETCH_BATCH = 1024
_CELL_OVERHEAD = 16  # rough per-value bookkeeping bytes for the result-size estimate

_LEADING_COMMENTS = r"(?:\s|--[^\n]*(?:\n|\Z)|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))*"
# Every SQLite statement except SELECT / WITH / VALUES; anything else is left to SQLite's parser,
# so a typo still gets SQLite's own "syntax error" message (EXPO-SQL reads those).
_DENIED_START = re.compile(
    rf"(?is)\A{_LEADING_COMMENTS}(alter|analyze|attach|begin|commit|create|delete|detach|drop|end|explain|insert"
    r"|pragma|reindex|release|replace|rollback|savepoint|update|vacuum)\b"
)
_ONLY_COMMENTS = re.compile(rf"(?is)\A{_LEADING_COMMENTS}\Z")
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
_READONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "collation_list",
        "function_list",
        "pragma_list",
        "module_list",
    }
)


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """Outcome of one query: rows as a tuple of tuples; ``error`` holds the (SQLite) message."""

    ok: bool
    columns: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    error: str | None = None
    timed_out: bool = False


def _error(msg: str, *, timed_out: bool = False) -> ExecResult:
    return ExecResult(ok=False, error=msg, timed_out=timed_out)


_ACTION_NAMES = {
    getattr(sqlite3, "SQLITE_" + n): n.replace("_", " ")
    for n in (
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "PRAGMA",
        "TRANSACTION",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "SAVEPOINT",
    )
    if hasattr(sqlite3, "SQLITE_" + n)
}
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})


class _SandboxConnection(sqlite3.Connection):
    """A connection that carries its sandbox guard (plain ``sqlite3.Connection`` takes no attributes)."""

    guard: _Guard


class _Guard:
    """Authorizer + deadline for one connection; remembers why it last denied something."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.denied: str | None = None

    def authorize(self, action, arg1, arg2, _db, _trigger):
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in _DENIED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            self.denied = f"function {arg2}() is not allowed (extension loading and file access are disabled)"
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READONLY_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in _SCHEMA_TABLES:
            # SQLite asks this while it builds an eponymous virtual table (json_each, pragma_table_info)
            # for a plain SELECT; a real write to the schema is still stopped by mode=ro and query_only.
            return sqlite3.SQLITE_OK
        what = _ACTION_NAMES.get(action, f"action {action}")
        if action == sqlite3.SQLITE_PRAGMA:
            what = f"PRAGMA {arg1}" + (f"={arg2}" if arg2 is not None else "")
        self.denied = f"{what} is not allowed: the database is opened read-only, only queries may run"
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0


def connect_readonly(db_path, *, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> _SandboxConnection:
    """Open ``db_path`` read-only with the sandbox installed (defences 1, 3 and 5 above).

    Raises ``FileNotFoundError`` / ``sqlite3.Error`` on failure; :func:`execute` turns these
    into error results. Use :func:`run_query` to run SQL on the returned connection.
    """
    path = pathlib.Path(os.fspath(db_path)).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {db_path} (pass the path to an existing .sqlite file)")
    conn = sqlite3.connect(
        f"{path.as_uri()}?mode=ro",
        uri=True,
        timeout=5.0,
        isolation_level=None,
        check_same_thread=False,
        factory=_SandboxConnection,
    )
    try:
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, int(max_value_bytes))
        conn.execute("PRAGMA query_only=ON")
        guard = _Guard()
        conn.set_authorizer(guard.authorize)
        conn.set_progress_handler(guard.progress, _PROGRESS_STEPS)
        conn.guard = guard
    except Exception:
        conn.close()
        raise
    return conn


def _check_sql(sql, max_sql_chars: int) -> tuple[str | None, str | None]:
    """Return (sql_text, None) or (None, error message) for input the sandbox refuses up front."""
    if isinstance(sql, (bytes, bytearray)):
        try:
            sql = bytes(sql).decode("utf-8")
        except UnicodeDecodeError as e:
            return None, f"SQL is not valid UTF-8 text ({e}); decode it before executing"
    if not isinstance(sql, str):
        return None, f"SQL must be a str, got {type(sql).__name__}"
    if len(sql) > max_sql_chars:
        return None, (
            f"SQL is {len(sql)} characters long, over the max_sql_chars={max_sql_chars} limit; "
            "a generated query this long is refused (raise max_sql_chars if it is intended)"
        )
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        return None, f"SQL is not valid UTF-8 text ({e.reason} at position {e.start})"
    if "\x00" in sql:
        return None, "SQL contains a NUL character; remove it"
    if _ONLY_COMMENTS.match(sql):
        return None, "empty SQL: there is no statement to execute (only whitespace or comments)"
    denied = _DENIED_START.match(sql)
    if denied:
        return None, (
            f"{denied.group(1).upper()} statements are not allowed: the database is opened read-only and only "
            "queries (SELECT, WITH ... SELECT, VALUES) may run"
        )
    return sql, None


def _value_bytes(v) -> int:
    return len(v) if isinstance(v, (str, bytes)) else 8


def run_query(
    conn: _SandboxConnection,
    sql,
    *,
    timeout_s: float = 30.0,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    text_errors: str = "strict",
    max_sql_chars: int = DEFAULT_MAX_SQL_CHARS,
) -> ExecResult:
    """Run one query on a connection from :func:`connect_readonly` (defences 2, 4 and 5 above)."""
    if text_errors not in TEXT_ERRORS:
        return _error(f"text_errors must be one of {TEXT_ERRORS}, got {text_errors!r}")
    text, problem = _check_sql(sql, max_sql_chars)
    if problem:
        return _error(problem)
    assert text is not None  # _check_sql returns the text whenever it reports no problem
    guard: _Guard = conn.guard
    guard.denied = None
    conn.text_factory = str if text_errors == "strict" else (lambda b: b.decode("utf-8", errors=text_errors))
    guard.deadline = time.monotonic() + timeout_s
    cur = None
    try:
        cur = conn.execute(text)
        if cur.description is None:
            return _error("empty SQL: there is no statement to execute (only whitespace or comments)")
        columns = tuple(d[0] for d in cur.description)
        rows: list[tuple] = []
        size = 0
        while True:
            batch = cur.fetchmany(_FETCH_BATCH)
            if not batch:
                break
            rows.extend(batch)
            if len(rows) > max_rows:
                return _error(f"result has more than max_rows={max_rows} rows; refine the query or raise max_rows")
            size += sum(_value_bytes(v) + _CELL_OVERHEAD for r in batch for v in r)
            if size > max_result_bytes:
                return _error(
                    f"result is larger than max_result_bytes={max_result_bytes}; "
                    "refine the query or raise max_result_bytes"
                )
        return ExecResult(ok=True, columns=columns, rows=tuple(rows))
    except sqlite3.Error as e:
        msg = str(e)
        if msg == "interrupted" and time.monotonic() > guard.deadline:
            return _error(f"interrupted: query timed out after {timeout_s:g} s", timed_out=True)
        if guard.denied and "not authorized" in msg:
            return _error(f"not authorized: {guard.denied}")
        return _error(msg)
    except MemoryError:  # SQLITE_NOMEM, e.g. over the pool worker's hard heap limit
        return _error("out of memory: the query needs more memory than the SQLite heap limit allows")
    except Exception as e:  # decode errors from text_factory, ...
        return _error(f"{type(e).__name__}: {e}")
    finally:
        guard.deadline = float("inf")
        if cur is not None:
            try:
                cur.close()
            except sqlite3.Error:
                pass


def execute(
    db_path,
    sql,
    *,
    timeout_s: float = 30.0,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    text_errors: str = "strict",
    max_sql_chars: int = DEFAULT_MAX_SQL_CHARS,
) -> ExecResult:
    """Execute one read-only query in the sandbox and return its rows.

    This is the execution behind Reward-SQL's outcome reward OR(C) (Sec. 5.1) and EX metric
    (Sec. 6.1), EXPO-SQL's clause-wise incremental execution (Sec. 3.2) and SQLConductor's ExecF1.

    Opens a fresh read-only connection (see the module docstring for every defence), runs exactly
    one statement, fetches at most ``max_rows`` rows and closes. Never raises: every failure is an
    ``ExecResult(ok=False, error=...)``; a query stopped by the deadline has ``timed_out=True``.
    For many queries use :class:`~rewardsql_jax.sql.pool.ExecutorPool`, which caches connections.
    """
    try:
        conn = connect_readonly(db_path, max_value_bytes=max_value_bytes)
    except FileNotFoundError as e:
        return _error(str(e))
    except (sqlite3.Error, OSError, ValueError, TypeError) as e:
        return _error(f"cannot open database {db_path!s}: {e}")
    try:
        return run_query(
            conn,
            sql,
            timeout_s=timeout_s,
            max_rows=max_rows,
            max_result_bytes=max_result_bytes,
            text_errors=text_errors,
            max_sql_chars=max_sql_chars,
        )
    finally:
        conn.close()
