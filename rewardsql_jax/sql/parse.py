"""sqlglot parsing of SQL that a model wrote: any text, including what sqlglot's recursive-descent parser cannot
take (a degenerate greedy generation such as 3,000 nested parentheses exhausts Python's recursion limit)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError


def parse_sql(sql: str, read: str = "sqlite") -> list[exp.Expr | None]:
    """``sqlglot.parse(sql, read=read)``, with a query nested too deeply for the parser raised as sqlglot's own
    ``ParseError`` (a subclass of ``SqlglotError``), so that callers treat it as any other unparseable text instead
    of a ``RecursionError`` ending the run."""
    try:
        return sqlglot.parse(sql, read=read)
    except RecursionError:
        raise ParseError(f"query nested too deeply to parse ({len(sql)} characters)") from None
