"""SQLite error messages -> erroneous clauses (EXPO-SQL section 3.2.3, Appendix A.3, Table 14).

``parse_error`` matches a SQLite message against the Table 14 patterns (plus the other messages SQLite gives
for SELECT queries) and extracts the offending element; ``trace_error`` finds the clause(s) containing it
and traces backwards along the logical order, adding the clauses that *define* the element (section 3.2.3:
"adding any clause that references or defines the error-causing element"; A.3 "Clause-level Tracing").

Rules per pattern (indices are spans of a ``SplitSQL``; references inside subqueries belong to the
enclosing clause):

* ``no such column: q.c`` -> clauses referencing ``q.c`` + the FROM/JOIN clause (or CTE) defining ``q``
  (Figure 2: the ORDER BY reference *and* the JOIN that brought the wrong table). ``no such column: c`` ->
  clauses referencing ``c`` + the FROM/JOIN clauses of those query parts (Table 14: "a failure in the data
  retrieval stage"); when ``q`` is defined nowhere, all FROM/JOIN clauses.
* ``no such table: t`` -> clauses naming ``t`` (as table or qualifier); ``ambiguous column name: c`` ->
  clauses referencing ``c`` unqualified + the JOIN clauses (or the comma FROM) that made it ambiguous.
* ``no such function: f`` / ``wrong number of arguments to function f()`` -> clauses calling ``f``.
* ``misuse of aggregate[ function|:] f()`` -> the FROM/JOIN/WHERE/GROUP BY clauses using a select alias
  (an aggregate reached through its alias), else those calling ``f``, else every clause calling ``f``;
  ``misuse of window function f()`` -> clauses calling ``f`` in FROM/JOIN/WHERE/GROUP BY/HAVING, else every
  clause calling ``f``; ``aggregate functions are not allowed in the GROUP BY clause`` -> GROUP BY;
  ``misuse of aliased ... x`` -> non-SELECT clauses using ``x``.
* ``datatype mismatch`` -> LIMIT when it has a non-numeric operand, else WHERE and JOIN (A.3: constraint and
  type failures point at the JOIN/WHERE conditions); ``... constraint failed`` -> WHERE and JOIN.
* ``near "x": syntax error`` -> the clause holding the occurrence of token ``x`` where SQLite's parser stops
  (SQLite names the token but not its offset; the occurrence is found by compiling text prefixes with
  ``EXPLAIN`` on an empty in-memory database, which never runs them; the first occurrence when that fails).
  When ``x`` is the keyword that starts a clause, the clause before it in the text is flagged instead (it was
  left unfinished, e.g. a trailing comma before FROM). ``unrecognized token: "x"`` -> the clause holding
  ``x``; ``incomplete input`` -> the last clause in the text.
* GROUP BY / ORDER BY term errors -> that clause; compound column-count mismatch -> every SELECT; HAVING
  errors -> HAVING; ``ORDER BY/LIMIT clause should come after UNION`` -> that clause; sub-select column
  count / row value errors -> clauses holding a subquery; ``no tables specified`` -> SELECT.
* Timeout or ``interrupted``: no location in the message; runaway queries come from the data-retrieval stage
  (missing join condition, recursive CTE), so the FROM/JOIN clauses and CTE definitions are flagged.
* Anything unmatched or unlocatable flags every clause (the whole query failed and no clause can be
  exonerated).
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3

from sqlglot.tokens import TokenType

from .clauses import SplitSQL

_NOT_NAMES = {TokenType.STRING, TokenType.NUMBER}


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """A parsed SQLite error: Table 14 ``category``, pattern ``name`` and offending ``element`` (or None)."""

    category: str
    name: str
    element: str | None = None


_PATTERNS = [
    ("schema", "no_such_column", r"no such column: (.+)$"),
    ("schema", "no_such_table", r"no such table: (.+)$"),
    ("schema", "ambiguous_column", r"ambiguous column name: (.+)$"),
    ("schema", "no_such_function", r"no such function: (\S+)"),
    ("schema", "wrong_arguments", r"wrong number of arguments to function (\S+?)\(\)"),
    ("logical", "aggregate_in_group_by", r"aggregate functions are not allowed in the GROUP BY clause"),
    ("logical", "misuse_aggregate", r"misuse of aggregate(?: function|:) (\S+?)\(\)"),
    ("logical", "misuse_window", r"misuse of window function (\S+?)\(\)"),
    ("logical", "misuse_alias", r"misuse of aliased (?:identifier|aggregate|window function) (\S+)"),
    ("logical", "group_by_range", r"GROUP BY term out of range"),
    ("logical", "order_by_term", r"ORDER BY term (?:out of range|does not match any column)"),
    ("logical", "compound_columns", r"SELECTs to the left and right of .* do not have the same number"),
    ("logical", "having", r"HAVING clause on a non-aggregate query|GROUP BY clause is required before HAVING"),
    ("logical", "misplaced_order_limit", r"(ORDER BY|LIMIT) clause should come after"),
    ("logical", "subquery_columns", r"sub-select returns \d+ columns|row value misused"),
    ("logical", "no_tables", r"no tables specified"),
    ("data", "datatype_mismatch", r"datatype mismatch"),
    ("data", "constraint", r"(?:NOT NULL|UNIQUE|CHECK|FOREIGN KEY) constraint failed"),
    ("syntax", "near", r'near "(.*)": syntax error'),
    ("syntax", "unrecognized_token", r'unrecognized token: "(.*)"'),
    ("syntax", "incomplete_input", r"incomplete input"),
    ("timeout", "interrupted", r"^interrupted$"),
]


def parse_error(message: str) -> ErrorInfo:
    """Match a SQLite error message against the EXPO-SQL Table 14 patterns (Appendix A.3)."""
    msg = (message or "").strip()
    for category, name, pattern in _PATTERNS:
        m = re.search(pattern, msg, flags=re.IGNORECASE)
        if m:
            return ErrorInfo(category, name, m.group(1) if m.groups() else None)
    return ErrorInfo("other", "unknown", None)


class _Index:
    """Token lookups over a split query."""

    def __init__(self, split: SplitSQL):
        self.split, self.toks = split, split.tokens
        self.n = len(self.toks)

    def span(self, k: int) -> int | None:
        return self.split.clause_at(self.toks[k].start)

    def typ(self, k: int):
        return self.toks[k].token_type if 0 <= k < self.n else None

    def names(self, name: str, qualifier: str | None = None, *, unqualified=False) -> list[int]:
        name = name.strip('"`[]').lower()
        out = []
        for k, t in enumerate(self.toks):
            if t.token_type in _NOT_NAMES or t.text.lower() != name:
                continue
            if qualifier is not None:
                if not (self.typ(k - 1) == TokenType.DOT and self.toks[k - 2].text.lower() == qualifier.lower()):
                    continue
            elif unqualified and self.typ(k - 1) == TokenType.DOT:
                continue
            out.append(k)
        return out

    def calls(self, func: str) -> list[int]:
        return [k for k in self.names(func) if self.typ(k + 1) == TokenType.L_PAREN]

    def spans_of(self, ks) -> set[int]:
        return {s for s in (self.span(k) for k in ks) if s is not None}

    def kinds(self, kinds, parts=None) -> set[int]:
        return {
            i
            for i, s in enumerate(self.split.spans)
            if s.kind in kinds and s.cte is None and (parts is None or s.part in parts)
        }

    def defining(self, name: str) -> set[int]:
        """FROM/JOIN clauses or CTE definitions that introduce table or alias ``name``."""
        low = name.strip('"`[]').lower()
        out = {i for i, s in enumerate(self.split.spans) if s.cte is not None and s.cte.strip('"`[]').lower() == low}
        for k in self.names(low):
            i = self.span(k)
            if i is None or self.split.spans[i].kind not in ("FROM", "JOIN") or self.split.spans[i].cte:
                continue
            if self.typ(k + 1) != TokenType.DOT and self.typ(k - 1) != TokenType.DOT:
                out.add(i)
        return out


def _parts(split: SplitSQL, idx: set[int]) -> set[int]:
    return {split.spans[i].part for i in idx}


def _fails_at(prefix: str, message: str) -> bool:
    """Whether SQLite's parser stops with ``message`` on ``prefix``: compiled (EXPLAIN, never run) against an
    empty in-memory database, so no user database is touched and syntax errors come before name errors."""
    con = sqlite3.connect(":memory:")
    try:
        con.execute("EXPLAIN " + prefix)
        return False
    except sqlite3.Error as e:
        return str(e) == message
    finally:
        con.close()


def _syntax_near(ix: _Index, token: str) -> set[int]:
    low, sql = token.lower(), ix.split.sql
    hits = [k for k, t in enumerate(ix.toks) if t.text.lower() == low or sql[t.start : t.end + 1].lower() == low]
    message = f'near "{token}": syntax error'
    # SQLite names the token, not its offset: the culprit is the first occurrence where parsing stops. Once
    # the parser has stopped at an occurrence, every longer prefix stops there too, so binary search.
    lo, hi = 0, len(hits)
    while lo < hi:
        mid = (lo + hi) // 2
        if _fails_at(sql[: ix.toks[hits[mid]].end + 1], message):
            hi = mid
        else:
            lo = mid + 1
    culprit = hits[lo : lo + 1] or hits[:1]
    for k in culprit:
        t = ix.toks[k]
        i = ix.span(k)
        if i is None:
            continue
        if ix.split.spans[i].start == t.start:
            before = [j for j, s in enumerate(ix.split.spans) if s.end <= t.start]
            if before:
                return {max(before, key=lambda j: ix.split.spans[j].end)}
        return {i}
    return set()


def _schema(ix: _Index, info: ErrorInfo) -> set[int]:
    split, el = ix.split, (info.element or "").strip()
    froms = ix.kinds(("FROM", "JOIN"))
    if info.name == "no_such_column":
        if "." in el:
            q, c = el.rsplit(".", 1)
            refs = ix.spans_of(ix.names(c, q))
            return refs | (ix.defining(q) or froms)
        refs = ix.spans_of(ix.names(el, unqualified=True))
        return refs | (ix.kinds(("FROM", "JOIN"), _parts(split, refs)) if refs else froms)
    if info.name == "no_such_table":
        name = el.split(".", 1)[1] if el.lower().startswith(("main.", "temp.")) else el
        return ix.spans_of(ix.names(name)) or froms
    if info.name == "ambiguous_column":
        c = el.rsplit(".", 1)[-1]
        refs = ix.spans_of(ix.names(c, unqualified=True))
        parts = _parts(split, refs) if refs else None
        return refs | (ix.kinds(("JOIN",), parts) or ix.kinds(("FROM",), parts))
    return ix.spans_of(ix.calls(el))  # no_such_function, wrong_arguments


def _logical(ix: _Index, info: ErrorInfo) -> set[int]:
    spans, el = ix.split.spans, info.element or ""
    fixed = {
        "aggregate_in_group_by": ("GROUP BY",),
        "group_by_range": ("GROUP BY",),
        "order_by_term": ("ORDER BY",),
        "compound_columns": ("SELECT",),
        "having": ("HAVING",),
        "no_tables": ("SELECT",),
    }
    if info.name in fixed:
        return ix.kinds(fixed[info.name])
    banned = ("FROM", "JOIN", "WHERE", "GROUP BY")
    if info.name == "misuse_window":
        calls = ix.spans_of(ix.calls(el))
        return {i for i in calls if spans[i].kind in banned + ("HAVING",)} or calls
    if info.name == "misuse_aggregate":
        aliases = [
            ix.toks[k + 1].text
            for k in range(ix.n - 1)
            if ix.typ(k) == TokenType.ALIAS and (s := ix.span(k)) is not None and spans[s].kind == "SELECT"
        ]
        uses = {i for a in aliases for i in ix.spans_of(ix.names(a, unqualified=True)) if spans[i].kind in banned}
        calls = ix.spans_of(ix.calls(el))
        return uses or {i for i in calls if spans[i].kind in banned} or calls
    if info.name == "misuse_alias":
        uses = ix.spans_of(ix.names(el, unqualified=True))
        return {i for i in uses if spans[i].kind != "SELECT"} or uses
    if info.name == "misplaced_order_limit":
        kind = "ORDER BY" if el.upper().startswith("ORDER") else "LIMIT"
        last = max((s.part for s in spans), default=0)
        return {i for i in ix.kinds((kind,)) if spans[i].part != last} or ix.kinds((kind,))
    if info.name == "subquery_columns":
        return ix.spans_of(
            k for k, t in enumerate(ix.toks) if t.token_type == TokenType.SELECT and ix.typ(k - 1) == TokenType.L_PAREN
        )
    return set()


def trace_error(split: SplitSQL, message: str | None, *, timed_out: bool = False) -> frozenset[int]:
    """Indices (into ``split.spans``) of the erroneous clauses for a failed execution (EXPO-SQL 3.2.3, A.3).

    Never empty for a query with clauses: an unlocatable error flags every clause (module docstring)."""
    ix = _Index(split)
    info = ErrorInfo("timeout", "interrupted") if timed_out else parse_error(message or "")
    out: set[int] = set()
    if info.category == "schema":
        out = _schema(ix, info)
    elif info.category == "logical":
        out = _logical(ix, info)
    elif info.name == "datatype_mismatch":
        lim = {
            i
            for i in ix.kinds(("LIMIT",))
            if any(
                t.token_type not in (TokenType.LIMIT, TokenType.OFFSET, TokenType.NUMBER, TokenType.COMMA)
                for t in ix.toks
                if split.spans[i].start <= t.start < split.spans[i].end
            )
        }
        out = lim or ix.kinds(("WHERE", "JOIN"))
    elif info.name == "constraint":
        out = ix.kinds(("WHERE", "JOIN"))
    elif info.name == "near":
        out = _syntax_near(ix, info.element or "")
    elif info.name == "unrecognized_token":
        pos = split.sql.find(info.element or "\0")
        if pos >= 0:
            at = split.clause_at(pos)
            before = [j for j, s in enumerate(split.spans) if s.end <= pos]
            out = {at} if at is not None else ({max(before, key=lambda j: split.spans[j].end)} if before else set())
    elif info.name == "incomplete_input":
        out = {max(range(len(split.spans)), key=lambda j: split.spans[j].end)} if split.spans else set()
    elif info.category == "timeout":
        out = ix.kinds(("FROM", "JOIN")) | {i for i, s in enumerate(split.spans) if s.cte is not None}
    return frozenset(out) if out else frozenset(range(len(split.spans)))
