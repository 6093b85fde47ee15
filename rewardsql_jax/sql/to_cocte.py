"""Deterministic rewrite of plain SQL into an equivalent Chain-of-CTEs (Reward-SQL section 4.1, cold start).

The paper converts gold SQL to CoCTEs with prompted LLMs (Figure 7: one CTE per logical operation) and keeps
the ones whose execution matches; this module is the rule-based counterpart (a sqlglot AST rewrite) for
seeding cold-start data and for tests.

Rewrite of one SELECT (applied recursively to every lifted sub-query), in logical order:
  * existing non-recursive CTEs become steps as they are; derived tables in FROM / JOIN and uncorrelated
    sub-queries in WHERE / HAVING / SELECT / ORDER BY (``IN (SELECT ..)``, scalar, EXISTS) become their own
    steps, referenced as ``step AS alias`` / ``(SELECT * FROM step)`` (correlated ones stay where they are);
  * per-table filter steps: WHERE conditions of a join that read one inner-side table (``cocte_steps``);
  * "filtered" / "joined" step: FROM + JOIN + WHERE, projecting exactly the columns later clauses use, each
    under an explicit unique alias (``T1.id AS id, T2.id AS T2_id``: no name collisions across joins); each
    further AND-ed condition of a single-table WHERE (or each condition of a join's WHERE that was not pushed
    down) is a filter step of its own;
  * "grouped" / "aggregated" step (GROUP BY, HAVING or aggregates), then a "having" filter step; the ORDER BY /
    LIMIT / DISTINCT stay with the aggregation, because SQLite breaks sort ties over an aggregate differently
    from a sort over a materialised step;
  * "top" step: ORDER BY + LIMIT of a non-aggregated top-level query;
  * final query: SELECT over the last step with the ordering at top level (a re-sort on the same keys),
    keeping the original output column names of columns and aliases.
A top-level query that still has one step (one operation, e.g. a single filter) gets a column-selection step
per table first (Figure 7's ``All_Star_Players``), when every column use can be attributed to its table.
Set operations convert each side into its own step(s) and combine ``SELECT * FROM side`` in the final
query. Without a safe rewrite (window functions, correlated sub-queries outside WHERE, qualified ``t.*``,
``*`` over joins with other column uses, WITH RECURSIVE, no FROM at all) the whole query becomes one CTE
followed by ``SELECT * FROM`` it; ``convert_to_cocte`` reports that fallback with a reason code.
Measured on Spider / BIRD gold SQL: benchmarks/cocte_conversion.py, figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .cocte import parse_single
from .cocte_ast import (
    Namer,
    ident,
    is_aggregate,
    is_correlated,
    is_star_from_step,
    keep_output_name,
    outer_nodes,
    qualify,
    resolve_alias_refs,
    rewrite_columns,
    star_from,
)
from .cocte_steps import StepBuilder, Unsupported

_D = "sqlite"
_Q = TypeVar("_Q", bound="exp.Query")  # promote_ctes returns the query it was given


@dataclasses.dataclass(frozen=True)
class CoCTEConversion:
    """Result of ``convert_to_cocte``: the CoCTE text, its number of CTE steps, whether the single-CTE
    fallback was used, and why (``reason``: a message; ``code``: a short reason code for reports)."""

    sql: str
    fallback: bool
    reason: str | None = None
    code: str | None = None
    steps: int = 0
    single_step: str | None = None  # structured rewrite with one step: why no second step (a reason code)


class _Converter(StepBuilder):
    def __init__(self, namer: Namer, pad: bool = False, schema: dict | None = None):
        self.namer = namer
        self.schema = schema
        self.origin: dict[str, str] = {}
        self.pad = pad  # add column-selection steps to the top-level SELECT (a single-operation query)
        self.depth = 0
        self.single_step: str | None = "set_operation_side"  # why padding added no step (see column_steps)
        self.steps: list[tuple[str, exp.Query]] = []

    def add(self, base: str, query: exp.Query) -> str:
        """Append a step named after ``base`` (made unique); returns its name."""
        name = self.namer(base)
        self.steps.append((name, query))
        return name

    def query(self, q: exp.Expr) -> exp.Query:
        """Convert ``q``: append its steps, return the final query over them."""
        if isinstance(q, exp.Subquery):
            q = q.this
        if isinstance(q, exp.SetOperation):
            return self.set_operation(q)
        if isinstance(q, exp.Select):
            return self.select(q)
        raise Unsupported(f"unsupported query node {type(q).__name__}", "unsupported_node")

    def materialize(self, q: exp.Query, suffix: str) -> str:
        """Convert ``q`` and make its final query a step; returns the step name. A final that only
        re-projects the last step's output columns unchanged is dropped and the last step is used."""
        n_before = len(self.steps)
        self.depth += 1
        try:
            final = self.query(q)
        finally:
            self.depth -= 1
        if len(self.steps) > n_before and _is_passthrough(final, self.steps[-1]):
            return self.steps[-1][0]
        return self.add(f"{self.base_name(q)}_{suffix}", final)

    def set_operation(self, q: exp.SetOperation) -> exp.Query:
        """UNION / INTERSECT / EXCEPT: each side becomes its own step(s); the final combines them."""
        q = self.promote_ctes(q.copy())
        out = q.copy()
        for key in ("this", "expression"):
            side = q.args[key]
            if isinstance(side, exp.SetOperation) and not side.args.get("order") and not side.args.get("limit"):
                out.set(key, self.set_operation(side))
            else:
                out.set(key, star_from(self.materialize(side, "part")))
        return out

    def promote_ctes(self, q: _Q) -> _Q:
        """Existing (non-recursive) CTEs of ``q`` become steps as they are; returns ``q`` without its WITH."""
        with_ = q.args.get("with_")
        if with_ is None:
            return q
        if with_.args.get("recursive"):
            raise Unsupported("WITH RECURSIVE", "recursive_cte")
        for cte in with_.expressions:
            if cte.args["alias"].columns:
                raise Unsupported("CTE with a column list", "cte_column_list")
            if cte.alias.lower() in {n.lower() for n, _ in self.steps}:
                raise Unsupported(f"CTE name {cte.alias!r} defined twice", "cte_name_reused")
            self.steps.append((cte.alias, cte.this))
        q.set("with_", None)
        return q

    def lift_subqueries(self, sel: exp.Select) -> None:
        """Derived tables and uncorrelated sub-queries (WHERE, HAVING, SELECT list, ORDER BY) of ``sel`` -> their
        own steps, in textual order (in place). Correlated ones stay; outside WHERE they force the fallback."""
        holders = [sel.args["from_"], *(sel.args.get("joins") or [])]
        for holder in holders:
            sub = holder.this
            if not isinstance(sub, exp.Subquery):
                continue
            if is_correlated(sub.this):
                raise Unsupported("correlated derived table", "correlated_derived_table")
            name = self.materialize(sub.this, "derived")
            table = exp.Table(this=ident(name))
            if sub.alias:
                table.set("alias", exp.TableAlias(this=ident(sub.alias)))
            sub.replace(table)
        order = sel.args["order"].expressions if sel.args.get("order") else []
        clauses = [sel.args.get("where"), sel.args.get("having"), *sel.expressions, *order]
        seen = set()
        for clause in [c for c in clauses if c is not None]:
            for q in outer_nodes(clause, exp.Query):
                target = q.this if isinstance(q, exp.Subquery) else q
                if id(target) in seen or is_correlated(target):
                    continue  # a clause that is itself a sub-query lists both the Subquery and its SELECT
                seen.add(id(target))
                target.replace(star_from(self.materialize(target, "subquery")))

    def select(self, sel: exp.Select) -> exp.Query:
        """Convert one SELECT: lifted sub-queries, per-table filters, filtered / joined step(s), grouped and
        HAVING steps or a top-k step, final query (section 4.1, Figure 7)."""
        sel = self.promote_ctes(sel.copy())
        if sel.args.get("from_") is None:
            return sel  # constants / scalar sub-queries only: nothing to split (a set-operation side becomes a step)
        if any(sel.find_all(exp.Window)):
            raise Unsupported("window function", "window_function")
        self.lift_subqueries(sel)
        items = list(sel.expressions)
        resolve_alias_refs(sel, items)
        later = [
            *items,
            *(sel.args["group"].expressions if sel.args.get("group") else []),
            *([sel.args["having"]] if sel.args.get("having") else []),
            *(o.this for o in (sel.args["order"].expressions if sel.args.get("order") else [])),
        ]
        for e in later:
            for q in outer_nodes(e, exp.Query):
                if not is_star_from_step(q, self.step_names()):
                    raise Unsupported("correlated sub-query outside WHERE", "correlated_subquery")
        stars = [s for e in items for s in outer_nodes(e, exp.Star) if not isinstance(s.parent, exp.Count)]
        qual_star = any(isinstance(e, exp.Column) and isinstance(e.this, exp.Star) for e in items)
        if qual_star or (stars and len(items) > 1):
            raise Unsupported("qualified or mixed star projection", "star_projection")
        grouped = (
            sel.args.get("group") is not None or bool(sel.args.get("having")) or any(is_aggregate(e) for e in later)
        )
        if self.pad and self.depth == 0:
            self.single_step = self.column_steps(sel, stars, grouped)
        pushed = self.push_down_filters(sel, stars)
        top_k = bool(not grouped and self.depth == 0 and sel.args.get("limit") and not sel.args.get("distinct"))
        src, qual, rewrite = self.source_step(sel, later, stars, grouped or top_k, pushed)
        items = [rewrite(e) for e in items]
        order = [rewrite(o) for o in sel.args["order"].expressions] if sel.args.get("order") else []
        if grouped:
            return self.group_step(sel, items, order, src, qual, rewrite)
        if top_k:
            src = self.top_k_step(sel, items, order, src, qual)
            if qual != src:  # read the table directly: the top step keeps bare column names
                items, order = [rewrite_columns(e, {}) for e in items], [rewrite_columns(o, {}) for o in order]
            qual = src
            sel = sel.copy()
            sel.set("limit", None)
            sel.set("offset", None)
        final = exp.Select().from_(exp.Table(this=ident(src)))
        final.set("expressions", [keep_output_name(e, orig) for e, orig in zip(items, sel.expressions)])
        for k in ("distinct", "limit", "offset"):
            final.set(k, sel.args.get(k))
        if order:
            final.set("order", exp.Order(expressions=[qualify(o, qual) for o in order]))
        return final


def _output_names(sel: exp.Select) -> list[str]:
    return ["*" if isinstance(e, exp.Star) else e.alias_or_name for e in sel.expressions]


def _is_passthrough(final: exp.Query, last: tuple[str, exp.Query]) -> bool:
    name, step = last
    if not isinstance(final, exp.Select) or not isinstance(step, exp.Select):
        return False
    if any(final.args.get(k) for k in ("joins", "where", "group", "having", "order", "limit", "offset", "distinct")):
        return False
    if final.args["from_"].this.name != name:
        return False
    plain = all(isinstance(e, (exp.Star, exp.Column)) for e in final.expressions)
    return plain and _output_names(final) == _output_names(step)


def _body_text(q: exp.Expr) -> str:
    text = q.sql(dialect=_D, pretty=True)
    return text if "\n\n" not in text else q.sql(dialect=_D)


def _render(steps: list[tuple[str, exp.Query]], final: exp.Query) -> str:
    parts = []
    for i, (name, q) in enumerate(steps):
        body = "\n".join("  " + line for line in _body_text(q).split("\n"))
        parts.append(f"{'WITH ' if i == 0 else ''}{ident(name).sql(dialect=_D)} AS (\n{body}\n)")
    return ",\n\n".join(parts) + "\n\n" + _body_text(final)


def _fallback(sql: str, tree: exp.Expr, reason: str, code: str) -> CoCTEConversion:
    body = sql.strip().rstrip(";").strip()
    if "\n\n" in body:
        body = tree.sql(dialect=_D)
    name = Namer(tree)("answer")
    indented = "\n".join("  " + line for line in body.split("\n"))
    text = f"WITH {name} AS (\n{indented}\n)\n\nSELECT * FROM {name}"
    return CoCTEConversion(sql=text, fallback=True, reason=reason, code=code, steps=1)


def _convert(tree: exp.Expr, pad: bool, schema: dict | None) -> tuple[str, int, str | None]:
    conv = _Converter(Namer(tree), pad=pad, schema=schema)
    final = conv.query(tree.copy())
    if not conv.steps:
        raise Unsupported("SELECT without FROM: nothing to split into steps", "no_from")
    text = _render(conv.steps, final)
    sqlglot.parse_one(text, read=_D)
    return text, len(conv.steps), conv.single_step


def convert_to_cocte(sql: str, *, schema: Mapping[str, Iterable[str]] | None = None) -> CoCTEConversion:
    """Rewrite one SQLite query into a Chain-of-CTEs in the Reward-SQL output format (section 4.1, Figure 7).

    Returns the CoCTE text and its step count, with ``fallback=True`` (and the reason and its code) when the
    structured rewrite was not possible and the whole query was wrapped in a single CTE. A structured rewrite
    with one step is retried with column-selection steps (see the module docstring). ``schema`` (optional,
    ``{table: column names}``, e.g. ``cocte_checks.table_columns(db_path)``) lets it skip a column-selection
    step that would copy a whole table. Raises ValueError for unparseable SQL.
    """
    if schema is not None:
        schema = {t.lower(): {c.lower() for c in cols} for t, cols in schema.items()}
    tree = parse_single(sql)
    if not isinstance(tree, exp.Query):
        raise ValueError(f"to_cocte needs a SELECT query, got a {type(tree).__name__} statement")
    try:
        text, n, _ = _convert(tree, pad=False, schema=schema)
    except Unsupported as e:
        return _fallback(sql, tree, str(e), e.code)
    except SqlglotError as e:
        return _fallback(sql, tree, f"generated SQL does not parse: {e}", "render_error")
    single = None
    if n < 2:
        try:
            padded = _convert(tree, pad=True, schema=schema)
        except (Unsupported, SqlglotError):
            padded = (text, n, "padding_failed")
        text, n, single = padded if padded[1] > n else (text, n, padded[2] or "single_operation")
    return CoCTEConversion(sql=text, fallback=False, steps=n, single_step=single if n < 2 else None)


def to_cocte(sql: str, *, schema: Mapping[str, Iterable[str]] | None = None) -> str:
    """Deterministic rule-based rewrite of plain SQL into an equivalent Chain-of-CTEs (Reward-SQL section 4.1).

    See the module docstring for the rewrite; ``convert_to_cocte`` also says whether the fallback was used.
    """
    return convert_to_cocte(sql, schema=schema).sql
