"""Chain-of-CTEs (CoCTE) parsing, prefixes and step annotation (Reward-SQL section 3.1, Definitions 1-2).

A CoCTE is ``WITH c_1 AS (q_1), ..., c_k AS (q_k) q_f``: every top-level CTE is one reasoning step and the
final query ``q_f`` produces the answer. The policy writes the steps separated by a blank line
(``"\\n\\n"``), see DESIGN.md. CTE *structure* is read from sqlglot's tokenizer and parser (so comments,
string literals and quoted identifiers never confuse the split); spans index the original text.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from .execute import ExecResult, execute
from .parse import parse_sql

_DIALECT = "sqlite"
RESULT_MAX_CHARS = 500


@dataclasses.dataclass(frozen=True)
class Step:
    """One CTE step. ``sql[start:end]`` is the whole definition ``name [(cols)] AS (body)`` (from the first
    character of the name to the closing parenthesis); ``body`` is the text between the parentheses, stripped;
    ``name`` is the CTE name without quotes."""

    name: str
    body: str
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class CoCTE:
    """Parsed Chain-of-CTEs: the top-level steps in order and the final query text (stripped)."""

    steps: tuple[Step, ...]
    final: str


def parse_single(sql: str) -> exp.Expr:
    """The one SQLite statement in ``sql`` as a sqlglot tree; TypeError / ValueError with the fix otherwise."""
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, got {type(sql).__name__}")
    if not sql.strip():
        raise ValueError("empty SQL: pass a query such as 'WITH a AS (SELECT ...) SELECT * FROM a'")
    try:
        trees = [t for t in parse_sql(sql, read=_DIALECT) if t is not None]
    except SqlglotError as e:
        raise ValueError(f"cannot parse SQL as SQLite: {e}") from None
    if len(trees) != 1:
        raise ValueError(f"expected exactly one SQL statement, got {len(trees)}: remove the extra statements")
    return trees[0]


def _top_level_ctes(tree: exp.Expr) -> list[exp.CTE]:
    with_ = tree.args.get("with_") or tree.args.get("with")
    return list(with_.expressions) if with_ is not None else []


def _skip_parens(tokens, i: int, sql: str) -> int:
    """Index just past the parenthesised group starting at tokens[i] (an L_PAREN)."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[j].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced parentheses in SQL: {sql[:80]!r}")


def split_cocte(sql: str) -> CoCTE:
    """Split a Chain-of-CTEs into its top-level CTE steps and final query (Reward-SQL Definition 2).

    Only the CTEs of the outermost WITH are steps; CTEs nested inside a step body stay part of that body.
    A query without a top-level WITH has zero steps and ``final`` = the whole (stripped) query.
    ``WITH RECURSIVE`` is accepted. Raises ValueError for empty, unparseable or multi-statement SQL.
    """
    tree = parse_single(sql)
    ctes = _top_level_ctes(tree)
    if not ctes:
        return CoCTE(steps=(), final=sql.strip())
    tokens = sqlglot.Dialect.get_or_raise(_DIALECT).tokenize(sql)
    i = 0
    if tokens[i].token_type != TokenType.WITH:
        raise ValueError("the top-level WITH must start the query (no parenthesised WITH): rewrite as WITH ... SELECT")
    i += 1
    if i < len(tokens) and tokens[i].token_type == TokenType.RECURSIVE:
        i += 1
    steps = []
    for k, cte in enumerate(ctes):
        name_tok = tokens[i]
        start = name_tok.start
        i += 1
        if tokens[i].token_type == TokenType.L_PAREN:  # column list: name(a, b) AS (...)
            i = _skip_parens(tokens, i, sql)
        if tokens[i].token_type != TokenType.ALIAS:
            raise ValueError(f"expected AS after CTE name {cte.alias!r}")
        i += 1
        while tokens[i].token_type != TokenType.L_PAREN:  # [NOT] MATERIALIZED
            i += 1
        open_tok = tokens[i]
        i = _skip_parens(tokens, i, sql)
        close_tok = tokens[i - 1]
        steps.append(
            Step(
                name=cte.alias, body=sql[open_tok.end + 1 : close_tok.start].strip(), start=start, end=close_tok.end + 1
            )
        )
        if k + 1 < len(ctes):
            if tokens[i].token_type != TokenType.COMMA:
                raise ValueError(f"expected ',' after CTE {cte.alias!r}")
            i += 1
    return CoCTE(steps=tuple(steps), final=sql[steps[-1].end :].strip())


def _quote_name(name: str) -> str:
    return exp.to_identifier(name).sql(dialect=_DIALECT)


def prefix_sql(sql: str, k: int) -> str:
    """Executable query for the first ``k`` steps: ``WITH <steps 1..k> SELECT * FROM <k-th CTE>``.

    This is how Reward-SQL annotates an intermediate step with its execution result (DESIGN.md, PRM input).
    ``k`` must be in 1..number of steps; the final step's result is the result of ``sql`` itself.
    The steps' text (and the ``WITH [RECURSIVE]`` keyword, leading comments) are kept verbatim.
    """
    cocte = split_cocte(sql)
    n = len(cocte.steps)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 1 <= k <= n:
        raise ValueError(
            f"k={k} is out of range: the query has {n} CTE step(s), so k must be in 1..{n} "
            "(execute the query itself for the final step)"
        )
    step = cocte.steps[k - 1]
    return f"{sql[: step.end]}\nSELECT * FROM {_quote_name(step.name)}"


def format_step_result(result: ExecResult, *, max_chars: int = RESULT_MAX_CHARS) -> str:
    """Render one step's execution result as ``<result>...</result>`` for the PRM input (DESIGN.md).

    Following Reward-SQL's released annotation code: a successful result is the dict of row counts
    (``{row_tuple: count}`` in first-seen order), cut at ``max_chars`` characters with ``...}`` appended;
    a failure becomes ``Total SQL result:0, Execution error: <message>``.
    """
    if result.ok:
        text = str(dict(Counter(tuple(r) for r in result.rows)))
        if len(text) > max_chars:
            text = text[:max_chars] + "...}"
    else:
        msg = "timeout" if result.timed_out and not result.error else result.error
        text = f"Total SQL result:0, Execution error: {msg}"
    return f"<result>{text}</result>"


def annotate_steps(db_path, sql: str, *, executor: Callable[..., ExecResult] = execute) -> list[str]:
    """Execution annotations for every step of a CoCTE, in order (Reward-SQL PRM input, DESIGN.md).

    Returns ``len(steps) + 1`` strings ``<result>...</result>``: one per CTE step (its ``prefix_sql``
    executed) and a last one for the final query (``sql`` executed as is). ``executor(db_path, sql)``
    must return an ExecResult; pass a cached or pooled executor to share work.
    """
    n = len(split_cocte(sql).steps)
    queries = [prefix_sql(sql, k) for k in range(1, n + 1)] + [sql]
    return [format_step_result(executor(db_path, q)) for q in queries]
