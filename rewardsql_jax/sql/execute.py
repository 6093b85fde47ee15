"""Read-only SQLite execution with a timeout (placeholder core; hardened by the SQL-engine issue)."""
from __future__ import annotations

import dataclasses
import sqlite3
import time


@dataclasses.dataclass(frozen=True)
class ExecResult:
    ok: bool
    columns: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    error: str | None = None
    timed_out: bool = False


def execute(db_path, sql, *, timeout_s: float = 30.0, max_rows: int = 100_000) -> ExecResult:
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return ExecResult(ok=False, error=f"cannot open database {db_path}: {e}")
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        cur = conn.execute(sql)
        rows = cur.fetchmany(max_rows)
        cols = tuple(d[0] for d in cur.description or ())
        return ExecResult(ok=True, columns=cols, rows=tuple(tuple(r) for r in rows))
    except sqlite3.Error as e:
        timed_out = time.monotonic() > deadline
        return ExecResult(ok=False, error=str(e), timed_out=timed_out)
    finally:
        conn.close()
