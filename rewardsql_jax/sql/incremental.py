"""Clause-wise incremental execution (EXPO-SQL section 3.2.2, Algorithm 1, Appendix A.2, Table 15).

Preprocessing (A.2): the SELECT list is replaced by ``SELECT *``; when the query has GROUP BY, SELECT and
GROUP BY form one unit (``SELECT *`` with GROUP BY is not meaningful SQL). Select-list aliases used in WHERE
are resolved to their expressions (Table 15), since the ``SELECT *`` steps no longer define them. Steps of one
query part, each an executable query extending the previous one in logical order::

    FROM/JOIN (SELECT *) -> +WHERE (SELECT *) -> +GROUP BY with the real SELECT -> +HAVING
    (no GROUP BY: -> +SELECT [with HAVING]) -> +ORDER BY -> +LIMIT/OFFSET

Set operations are split into parts (Table 15), each part stepped on its own; then the bare compound is
compared with the first part's result (UNION adds rows, INTERSECT/EXCEPT remove some), a change there
blaming the clauses of the later parts; a compound's ORDER BY/LIMIT are stepped after the whole compound.
CTEs stay attached to every step, undecomposed (Table 15).

Comparison (Algorithm 1): ``d_1 = diff(R_1, R_gold)`` restricted to ``col_count`` (A.2: "only consider
whether the diff_type is column_count"); ``d_i = diff(R_i, R_{i-1})`` for later steps (ORDER BY steps compare
sequences); the final ``D* = diff(R_pred, R_gold)``. A step is flagged when ``d_i`` and ``D*`` share a type
(line 14, "d_i in D*", read for sets as a non-empty intersection). A flagged step marks the clauses it adds;
for a multi-clause unit (FROM + JOINs, GROUP BY + SELECT) only those that Table 12 lists as candidates for the
shared types (all of them when none is listed), which is the paper's "diff types narrow down candidates while
incremental execution pinpoints the exact clause" (section 6.1).

Why a fallback: taken literally, Algorithm 1 can flag nothing for a wrong result. Example: WHERE turns the
FROM rows into a subset (``d = {row_subset}``) while the final difference is ``row_disjoint``; or a missing
DISTINCT, whose only step change is the projection's ``col_count`` while ``D* = {row_dedup}``. An incorrect
query must never get all-positive clause rewards, so when no step is flagged (or the steps cannot be built
or executed) we flag the clauses whose kinds Table 12 lists for the types in ``D*``; when the query has none
of those kinds (say ``row_superset`` with no JOIN and no WHERE, i.e. a missing filter) every clause is
flagged. Steps whose query fails to execute are skipped (not compared).
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from sqlglot import exp
from sqlglot.errors import SqlglotError

from .clauses import DIALECT, KINDS, SplitSQL
from .diff import candidate_clauses, diff_types
from .execute import ExecResult
from .parse import parse_sql

_N = TypeVar("_N", bound="exp.Expr")  # _strip returns a copy of the node it was given
_FIRST_ONLY = frozenset({"col_count"})
_COMPOUND_KINDS = tuple(k for k in KINDS if k not in ("ORDER BY", "LIMIT"))


@dataclasses.dataclass(frozen=True)
class Step:
    """One incremental query: ``kinds`` are the clause kinds it adds in the query parts ``parts`` (for the
    compound step: every clause of the parts after the first), ``prev`` the step it is compared with (None:
    compared with gold, col_count only), ``ordered`` whether the comparison looks at row order, ``final``
    whether it is the whole query."""

    sql: str
    parts: tuple[int, ...]
    kinds: tuple[str, ...]
    prev: int | None
    ordered: bool = False
    final: bool = False


@dataclasses.dataclass(frozen=True)
class Located:
    """Result of Algorithm 1: ``flagged`` span indices, per-step diffs ``step_diffs`` (None: not run or
    failed), and whether the Table 12 fallback chose the flags."""

    flagged: frozenset[int]
    step_diffs: tuple[frozenset[str] | None, ...]
    fallback: bool


def _parts(node: exp.Expr) -> list[exp.Select]:
    if isinstance(node, exp.SetOperation):
        return _parts(node.this) + _parts(node.expression)
    if isinstance(node, exp.Subquery):
        return _parts(node.this)
    if isinstance(node, exp.Select):
        return [node]
    raise ValueError(f"cannot step a {type(node).__name__} query part")


def _resolve_aliases(sel: exp.Select, cond: exp.Expression) -> exp.Expression:
    aliases = {a.alias.lower(): a.this for a in sel.expressions if isinstance(a, exp.Alias) and a.alias}
    aliases = {k: v for k, v in aliases.items() if not (isinstance(v, exp.Column) and v.name.lower() == k)}
    if not aliases:
        return cond
    cond = cond.copy()
    for col in list(cond.find_all(exp.Column)):
        if not col.table and col.name.lower() in aliases and col.find_ancestor(exp.Select) is None:
            col.replace(exp.Paren(this=aliases[col.name.lower()].copy()))
    return cond


def _sql(node: exp.Expr, with_: exp.Expr | None) -> str:
    node = node.copy()
    if with_ is not None:
        node.set("with_", with_.copy())
    return node.sql(dialect=DIALECT)


def _strip(sel: _N, *keys: str) -> _N:
    out = sel.copy()
    for k in keys:
        out.set(k, None)
    out.set("with_", None)
    return out


def _part_steps(sel: exp.Select, part: int, with_, base: int) -> list[Step]:
    """Steps of one part without its ORDER BY/LIMIT; ``base`` is the index of the first step."""
    steps: list[Step] = []
    core = _strip(sel, "order", "limit", "offset")
    prev = None
    if core.args.get("from_") is not None:
        q = _strip(core, "where", "group", "having", "distinct")
        q.set("expressions", [exp.Star()])
        steps.append(Step(_sql(q, with_), (part,), ("FROM", "JOIN"), None))
        prev = base
        if core.args.get("where") is not None:
            q = q.copy()
            q.set("where", exp.Where(this=_resolve_aliases(sel, core.args["where"].this)))
            steps.append(Step(_sql(q, with_), (part,), ("WHERE",), prev))
            prev = base + len(steps) - 1
    if core.args.get("group") is not None:
        q = _strip(core, "having")
        steps.append(Step(_sql(q, with_), (part,), ("GROUP BY", "SELECT"), prev))
        prev = base + len(steps) - 1
        if core.args.get("having") is not None:
            steps.append(Step(_sql(core, with_), (part,), ("HAVING",), prev))
    else:
        kinds = ("HAVING", "SELECT") if core.args.get("having") is not None else ("SELECT",)
        steps.append(Step(_sql(core, with_), (part,), kinds, prev))
    return steps


def build_steps(sql: str) -> tuple[Step, ...]:
    """Incremental queries of Algorithm 1 (EXPO-SQL A.2) for ``sql``; ValueError if sqlglot cannot parse it."""
    try:
        trees = parse_sql(sql, read=DIALECT)
    except SqlglotError as e:
        raise ValueError(f"cannot build incremental steps, sqlglot failed to parse the query: {e}") from e
    if len(trees) != 1 or trees[0] is None:
        raise ValueError("cannot build incremental steps: expected exactly one SQL statement")
    root = trees[0]
    with_ = root.args.get("with_")
    parts = _parts(root)
    steps: list[Step] = []
    first_part_end = None
    for p, sel in enumerate(parts):
        steps.extend(_part_steps(sel, p, with_, len(steps)))
        first_part_end = len(steps) - 1 if first_part_end is None else first_part_end
    last = len(parts) - 1
    order, limit = root.args.get("order"), root.args.get("limit")
    prev = len(steps) - 1
    if isinstance(root, exp.SetOperation):
        # The set operation combines part 1.. into part 0's rows: compare with part 0 and blame the later parts.
        steps.append(
            Step(
                _sql(_strip(root, "order", "limit", "offset"), with_),
                tuple(range(1, last + 1)),
                _COMPOUND_KINDS,
                first_part_end,
            )
        )
        prev = len(steps) - 1
    if order is not None:
        q = _strip(root, "limit", "offset")
        steps.append(Step(_sql(q, with_), (last,), ("ORDER BY",), prev, ordered=True))
        prev = len(steps) - 1
    if limit is not None:
        steps.append(Step(_sql(root, None), (last,), ("LIMIT",), prev))
    steps[-1] = dataclasses.replace(steps[-1], final=True)
    return tuple(steps)


def run_steps(steps, pred: ExecResult, run) -> tuple[list[ExecResult | None], int]:
    """Execute ``steps`` with ``run(sql) -> ExecResult``, reusing ``pred`` for the final step and one result
    for repeated texts; returns the results and the number of ``run`` calls."""
    results: list[ExecResult | None] = []
    seen: dict[str, ExecResult] = {}
    calls = 0
    for st in steps:
        if st.final:
            results.append(pred)
            continue
        if st.sql not in seen:
            seen[st.sql] = run(st.sql)
            calls += 1
        results.append(seen[st.sql])
    return results, calls


def _step_spans(split: SplitSQL, st: Step) -> list[int]:
    return [i for i, s in enumerate(split.spans) if s.part in st.parts and s.kind in st.kinds and s.cte is None]


def fallback_flags(split: SplitSQL, final_diff) -> frozenset[int]:
    """Table 12 candidates of ``final_diff`` present in the query, or every clause when none is present."""
    kinds = candidate_clauses(final_diff)
    hit = frozenset(i for i, s in enumerate(split.spans) if s.kind in kinds and s.cte is None)
    return hit or frozenset(i for i, s in enumerate(split.spans) if s.cte is None)


def locate(split: SplitSQL, steps, results, gold: ExecResult, final_diff) -> Located:
    """Erroneous clauses of an executable wrong query by Algorithm 1 (EXPO-SQL 3.2.2, A.2), with the Table 12
    fallback when no step is flagged (see the module docstring). Indices refer to ``split.spans``."""
    final_diff = frozenset(final_diff)
    diffs: list[frozenset[str] | None] = []
    flagged: set[int] = set()
    for st, res in zip(steps, results):
        ref = gold if st.prev is None else results[st.prev]
        if res is None or not res.ok or ref is None or not ref.ok:
            diffs.append(None)
            continue
        d = frozenset(diff_types(res, ref, ordered=st.ordered))
        if st.prev is None:
            d &= _FIRST_ONLY
        diffs.append(d)
        shared = d & final_diff
        if not shared or not st.kinds:
            continue
        idx = _step_spans(split, st)
        if len(st.kinds) > 1:
            cands = candidate_clauses(shared)
            idx = [i for i in idx if split.spans[i].kind in cands] or idx
        flagged.update(idx)
    fallback = not flagged
    if fallback:
        flagged = set(fallback_flags(split, final_diff))
    return Located(frozenset(flagged), tuple(diffs), fallback)
