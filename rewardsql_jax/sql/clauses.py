"""SQL clause splitting with character spans, in logical execution order (EXPO-SQL sections 3.1, 3.2.2, A.4).

A query is a sequence of clauses (section 3.1); every clause's tokens later share one reward (section 3.3),
so spans index the *original* text, never sqlglot's regenerated SQL. Spans come from sqlglot's tokenizer
(sqlite dialect), whose tokens carry character offsets: a clause starts at its keyword token at parenthesis
depth 0 of its query part and ends with the last token before the next clause keyword. Whitespace and
comments between clauses belong to no clause. Kinds and spans:

* ``FROM`` (with its tables, comma joins and FROM-subqueries), each ``JOIN`` (with its ``LEFT``/``INNER``/...
  modifiers and its ``ON``/``USING`` condition), ``WHERE``, ``GROUP BY``, ``HAVING``, ``SELECT`` (the select
  list, incl. ``DISTINCT``), ``ORDER BY``, ``LIMIT`` (with ``OFFSET``). A ``WINDOW`` clause stays in the
  clause before it.
* Listed in the logical order FROM/JOIN -> WHERE -> GROUP BY -> HAVING -> SELECT -> ORDER BY -> LIMIT.
* Set operations (UNION/INTERSECT/EXCEPT, Table 15) split the query into parts, each part's clauses listed in
  turn; a trailing ORDER BY/LIMIT (which SQLite applies to the whole compound) is listed with the last part.
* Nested subqueries are inside their enclosing clause's span (Table 15).
* CTEs (Table 15: "identified as erroneous when the referencing FROM/JOIN step produces a diff"): every CTE
  definition ``[WITH] name AS (...)`` is one span of the kind of the clause that first references it (in
  logical order) and is linked to that clause (``ClauseSpan.ref``), so it inherits that clause's verdict.

Text that sqlglot cannot parse (the syntax-error case) is still split from its tokens (``SplitSQL.parsed`` is
False); an unterminated string is treated as running to the end of the text.
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from .parse import parse_sql

DIALECT = "sqlite"
KINDS = ("FROM", "JOIN", "WHERE", "GROUP BY", "HAVING", "SELECT", "ORDER BY", "LIMIT")
LOGICAL_RANK = {k: i for i, k in enumerate(KINDS)}

_STARTS = {
    TokenType.SELECT: "SELECT",
    TokenType.FROM: "FROM",
    TokenType.JOIN: "JOIN",
    TokenType.WHERE: "WHERE",
    TokenType.GROUP_BY: "GROUP BY",
    TokenType.HAVING: "HAVING",
    TokenType.ORDER_BY: "ORDER BY",
    TokenType.LIMIT: "LIMIT",
}
_JOIN_MODIFIERS = {
    TokenType.LEFT,
    TokenType.RIGHT,
    TokenType.FULL,
    TokenType.INNER,
    TokenType.OUTER,
    TokenType.CROSS,
    TokenType.NATURAL,
}
_SET_OPS = {TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT}


@dataclasses.dataclass(frozen=True)
class Clause:
    """One clause of a query: ``sql[start:end]`` is its text; ``reward`` and ``erroneous`` as in EXPO-SQL
    Eqs. (1)-(3)."""

    kind: str
    start: int
    end: int
    reward: float = 0.0
    erroneous: bool = False


@dataclasses.dataclass(frozen=True)
class ClauseSpan:
    """A clause found by the splitter. ``part`` is the set-operation part (-1 for a CTE definition);
    ``cte`` the CTE name for a CTE definition; ``ref`` the index (in ``SplitSQL.spans``) of the clause whose
    verdict a CTE definition inherits, or None."""

    kind: str
    start: int
    end: int
    part: int
    cte: str | None = None
    ref: int | None = None


@dataclasses.dataclass(frozen=True)
class SplitSQL:
    """A split query: ``spans`` in logical order, ``tokens`` of the text, ``parsed`` whether sqlglot parses it."""

    sql: str
    spans: tuple[ClauseSpan, ...]
    tokens: tuple[Token, ...]
    parsed: bool

    def clause_at(self, pos: int) -> int | None:
        """Index of the span containing character ``pos``, or None."""
        for i, s in enumerate(self.spans):
            if s.start <= pos < s.end:
                return i
        return None


def tokenize(sql: str) -> list[Token]:
    """sqlglot (sqlite) tokens of ``sql``; from an unterminated quote on, the text is one opaque token."""
    tokenizer = sqlglot.Dialect.get_or_raise(DIALECT).tokenizer()
    try:
        return list(tokenizer.tokenize(sql))
    except SqlglotError:
        pass
    toks, cut = [], 0
    for q in reversed([i for i, ch in enumerate(sql) if ch in "'\"`["]):
        try:
            toks, cut = list(tokenizer.tokenize(sql[:q])), q
            break
        except SqlglotError:
            continue
    rest = sql[cut:].rstrip()
    if rest.strip():
        start = cut + len(rest) - len(rest.lstrip())
        toks.append(Token(TokenType.STRING, rest.strip(), start=start, end=cut + len(rest) - 1))
    return toks


def _match_parens(tokens: list[Token]) -> dict[int, int]:
    stack, match = [], {}
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            stack.append(i)
        elif t.token_type == TokenType.R_PAREN and stack:
            match[stack.pop()] = i
    return match


def _depths(tokens: list[Token]) -> list[int]:
    depth, out = 0, []
    for t in tokens:
        if t.token_type == TokenType.R_PAREN:
            depth = max(0, depth - 1)
        out.append(depth)
        if t.token_type == TokenType.L_PAREN:
            depth += 1
    return out


def _split_cte_block(tokens, lo, hi, match):
    """``(definitions, body_lo)``: ``(name, start, end)`` of each CTE after a leading WITH, and where the
    main query starts."""
    if lo >= hi or tokens[lo].token_type != TokenType.WITH:
        return [], lo
    i = lo + 1
    if i < hi and tokens[i].token_type == TokenType.RECURSIVE:
        i += 1
    defs, def_start = [], tokens[lo].start
    while i < hi:
        name = tokens[i].text
        i += 1
        while i < hi and tokens[i].token_type != TokenType.ALIAS:  # optional column list
            i = match[i] + 1 if tokens[i].token_type == TokenType.L_PAREN and i in match else i + 1
        while i < hi and tokens[i].token_type != TokenType.L_PAREN:  # AS [NOT] [MATERIALIZED]
            i += 1
        if i >= hi or i not in match:
            return defs, i
        close = match[i]
        defs.append((name, def_start, tokens[close].end + 1))
        i = close + 1
        if i < hi and tokens[i].token_type == TokenType.COMMA:
            i += 1
            if i < hi:
                def_start = tokens[i].start
            continue
        break
    return defs, i


def _split_part(tokens, depth, lo, hi, part, match):
    """``(spans, next_part)`` of one query part ``tokens[lo:hi]``, recursing into a parenthesised part."""
    d0 = depth[lo] if lo < hi else 0
    starts = []
    for i in range(lo, hi):
        t = tokens[i]
        if depth[i] != d0 or t.token_type not in _STARTS:
            continue
        j = i
        if t.token_type == TokenType.JOIN:
            while j - 1 >= lo and depth[j - 1] == d0 and tokens[j - 1].token_type in _JOIN_MODIFIERS:
                j -= 1
        starts.append((j, _STARTS[t.token_type]))
    if not starts and lo < hi and tokens[lo].token_type == TokenType.L_PAREN and match.get(lo) == hi - 1:
        return _split_body(tokens, depth, lo + 1, hi - 1, part, match)
    spans = []
    for k, (j, kind) in enumerate(starts):
        end_tok = (starts[k + 1][0] if k + 1 < len(starts) else hi) - 1
        spans.append(ClauseSpan(kind, tokens[j].start, tokens[end_tok].end + 1, part))
    return spans, part + 1


def _split_body(tokens, depth, lo, hi, part0, match):
    """Spans of a (possibly compound) query in ``tokens[lo:hi]``; returns ``(spans, next_part)``."""
    d0 = depth[lo] if lo < hi else 0
    bounds, cur = [], lo
    i = lo
    while i < hi:
        if depth[i] == d0 and tokens[i].token_type in _SET_OPS:
            bounds.append((cur, i))
            i += 1
            while i < hi and tokens[i].token_type in (TokenType.ALL, TokenType.DISTINCT):
                i += 1
            cur = i
            continue
        i += 1
    bounds.append((cur, hi))
    spans, part = [], part0
    for a, b in bounds:
        got, part = _split_part(tokens, depth, a, b, part, match)
        spans.extend(got)
    return spans, part


def _order_logically(spans: list[ClauseSpan]) -> list[ClauseSpan]:
    return sorted(spans, key=lambda s: (s.part, LOGICAL_RANK[s.kind], s.start))


def split_sql(sql: str) -> SplitSQL:
    """Split ``sql`` into clause spans in logical execution order (EXPO-SQL 3.2.2, Table 15); see the module
    docstring for the exact rules. Raises ValueError on empty text."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("cannot split an empty SQL query; pass the generated SQL text")
    tokens = tokenize(sql)
    try:
        parsed = len(parse_sql(sql, read=DIALECT)) == 1
    except SqlglotError:
        parsed = False
    depth, match = _depths(tokens), _match_parens(tokens)
    hi = len(tokens)
    while hi > 0 and tokens[hi - 1].token_type == TokenType.SEMICOLON:
        hi -= 1
    ctes, body_lo = _split_cte_block(tokens, 0, hi, match)
    body = _order_logically(_split_body(tokens, depth, body_lo, hi, 0, match)[0])
    cte_spans = [ClauseSpan("FROM", a, b, -1, cte=name) for name, a, b in ctes]
    spans = _link_ctes(cte_spans + body, tokens)
    return SplitSQL(sql, tuple(spans), tuple(tokens), parsed)


def _link_ctes(spans: list[ClauseSpan], tokens: list[Token]) -> list[ClauseSpan]:
    """Give each CTE definition the kind of (and a link to) the first clause in logical order that names it."""
    out = list(spans)
    for ci in range(len(out) - 1, -1, -1):  # later CTEs first, so chains resolve to a body clause
        s = out[ci]
        if s.cte is None:
            continue
        name = s.cte.strip('"`[]').lower()
        for j, other in enumerate(out):
            if j == ci or (other.cte is not None and j < ci):
                continue
            if any(
                t.text.lower() == name
                and other.start <= t.start < other.end
                and t.token_type in (TokenType.VAR, TokenType.IDENTIFIER)
                for t in tokens
            ):
                target = out[j]
                ref = target.ref if target.ref is not None else j
                out[ci] = dataclasses.replace(s, kind=out[ref].kind, ref=ref)
                break
    return out


def split_clauses(sql: str) -> list[Clause]:
    """Clauses of ``sql`` (kind and char span, reward 0) in logical execution order (EXPO-SQL 3.1, 3.2.2)."""
    return [Clause(s.kind, s.start, s.end) for s in split_sql(sql).spans]
