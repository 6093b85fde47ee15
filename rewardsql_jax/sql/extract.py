"""The SQL query in a chat model's free-text reply (zero-shot baselines answer with prose, fences and SQL)."""

from __future__ import annotations

import re

from sqlglot.errors import SqlglotError

from .parse import parse_sql

_SQL_FENCE = re.compile(r"```[ \t]*(?:sqlite|sql)\b[^\n]*\n?(.*?)(?:```|$)", re.S | re.I)
_ANY_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.S)
_START = r"\bSELECT\b|\bWITH\s+(?:RECURSIVE\s+)?[\w\"`\[\]]+\s*(?:\([^)]*\)\s*)?AS\s*\("


def _parses(sql: str) -> bool:
    try:
        trees = parse_sql(sql)
    except SqlglotError:
        return False
    return bool(trees) and trees[0] is not None


def _until_end(text: str) -> str:
    """``text`` up to the first ``;`` or code fence outside a quoted string."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch == ";" or text.startswith("```", i):
            return text[:i]
        elif ch in "'\"`":
            quote = ch
    return text


def _statement(text: str, start: int) -> str:
    """The query beginning at ``start``: up to the first ``;`` or fence, and of its lines the most that parse
    (prose after the query is left out); the first line when none does."""
    body = _until_end(text[start:]).strip()
    lines = body.split("\n")
    for n in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:n]).strip()
        if _parses(candidate):
            return candidate
    return lines[0].strip()


def extract_sql(reply: str) -> str:
    """The first SQLite query in ``reply``: the body of a ```sql (or ```sqlite) fence when there is one, else of
    the first fence holding a query, else the reply itself; in it the first ``SELECT`` or ``WITH <name> AS (`` (an
    upper-case keyword before a lower-case one, so prose such as "select the rows" is passed over) that starts a
    parseable statement, cut at ``;``. "" when the reply holds no query (evaluated as wrong)."""
    if not isinstance(reply, str):
        return ""
    fences = [m.group(1) for m in (_SQL_FENCE.search(reply), _ANY_FENCE.search(reply)) if m is not None]
    body = next((f for f in fences if re.search(_START, f, re.I)), reply)
    starts = [m.start() for m in re.finditer(_START, body)]
    starts += [m.start() for m in re.finditer(_START, body, re.I) if m.start() not in starts]
    statements = [_statement(body, s) for s in starts]
    return next((s for s in statements if _parses(s)), statements[0] if statements else "")
