"""Deterministic rewrite of plain SQL into an equivalent Chain-of-CTEs (Reward-SQL section 4.1, cold start).

The paper converts gold SQL to CoCTEs with prompted LLMs and keeps the ones whose execution matches; this
module is the rule-based counterpart (a sqlglot AST rewrite) for seeding cold-start data and for tests.

Rewrite of one SELECT (applied recursively to every lifted sub-query):
  * existing non-recursive CTEs become steps as they are; derived tables in FROM / JOIN and uncorrelated
    sub-queries in WHERE / HAVING (``IN (SELECT ..)``, scalar, EXISTS) are converted into their own steps,
    referenced as ``step AS alias`` / ``(SELECT * FROM step)`` (correlated ones stay where they are);
  * "filtered" / "joined" step: FROM + JOIN + WHERE, projecting exactly the columns later clauses use, each
    under an explicit unique alias (``T1.id AS id, T2.id AS T2_id``: no name collisions across joins);
  * "grouped" / "aggregated" step (GROUP BY, HAVING or aggregates): reads the filtered step (or the table
    directly when there is no WHERE / JOIN) and keeps the query's ORDER BY / LIMIT / DISTINCT, because
    SQLite breaks sort ties over an aggregate differently from a sort over a materialised step;
  * final query: SELECT over the last step with the ordering at top level (ORDER BY / LIMIT / OFFSET, or a
    re-sort on the grouped step's keys), keeping the original output column names of columns and aliases.
Set operations convert each side into its own step(s) and combine ``SELECT * FROM side`` in the final
query. Without a safe rewrite (window functions, correlated sub-queries outside WHERE, qualified ``t.*``,
``*`` over joins with other column uses, WITH RECURSIVE, no FROM at all) the whole query becomes one CTE
followed by ``SELECT * FROM`` it; ``convert_to_cocte`` reports that fallback and its reason.
Measured on Spider gold SQL: see benchmarks/cocte_conversion.py.
"""
from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .cocte import _parse_single
from .cocte_ast import (Namer, aliased, col_key, column, fresh_alias, ident, is_aggregate, is_correlated,
                        is_star_from_step, keep_output_name, main_table, out_name, outer_nodes, qualify,
                        resolve_alias_refs, rewrite_columns, star_from)

_D = "sqlite"


@dataclasses.dataclass(frozen=True)
class CoCTEConversion:
    """Result of ``convert_to_cocte``: the CoCTE text, whether the single-CTE fallback was used, and why."""

    sql: str
    fallback: bool
    reason: str | None = None


class _Unsupported(Exception):
    """A construct the structured rewrite does not handle; triggers the single-CTE fallback."""


class _Converter:
    def __init__(self, namer: Namer):
        self.namer = namer
        self.steps: list[tuple[str, exp.Query]] = []

    def add(self, base: str, query: exp.Query) -> str:
        """Append a step named after ``base`` (made unique); returns its name."""
        name = self.namer(base)
        self.steps.append((name, query))
        return name

    def query(self, q: exp.Query) -> exp.Query:
        """Convert ``q``: append its steps, return the final query over them."""
        if isinstance(q, exp.Subquery):
            q = q.this
        if isinstance(q, exp.SetOperation):
            return self.set_operation(q)
        if isinstance(q, exp.Select):
            return self.select(q)
        raise _Unsupported(f"unsupported query node {type(q).__name__}")

    def materialize(self, q: exp.Query, suffix: str) -> str:
        """Convert ``q`` and make its final query a step; returns the step name. A final that only
        re-projects the last step's output columns unchanged is dropped and the last step is used."""
        n_before = len(self.steps)
        final = self.query(q)
        if len(self.steps) > n_before and _is_passthrough(final, self.steps[-1]):
            return self.steps[-1][0]
        return self.add(f"{main_table(q)}_{suffix}", final)

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

    def promote_ctes(self, q: exp.Query) -> exp.Query:
        """Existing (non-recursive) CTEs of ``q`` become steps as they are; returns ``q`` without its WITH."""
        with_ = q.args.get("with_")
        if with_ is None:
            return q
        if with_.args.get("recursive"):
            raise _Unsupported("WITH RECURSIVE")
        for cte in with_.expressions:
            if cte.args["alias"].columns:
                raise _Unsupported("CTE with a column list")
            if cte.alias.lower() in {n.lower() for n, _ in self.steps}:
                raise _Unsupported(f"CTE name {cte.alias!r} defined twice")
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
                raise _Unsupported("correlated derived table")
            name = self.materialize(sub.this, "derived")
            table = exp.Table(this=ident(name))
            if sub.alias:
                table.set("alias", exp.TableAlias(this=ident(sub.alias)))
            sub.replace(table)
        order = sel.args["order"].expressions if sel.args.get("order") else []
        clauses = [sel.args.get("where"), sel.args.get("having"), *sel.expressions, *order]
        for clause in [c for c in clauses if c is not None]:
            for q in outer_nodes(clause, exp.Query):
                target = q.this if isinstance(q, exp.Subquery) else q
                if is_correlated(target):
                    continue
                target.replace(star_from(self.materialize(target, "subquery")))

    def select(self, sel: exp.Select) -> exp.Query:
        """Convert one SELECT: lifted sub-queries, filtered step, grouped step, final query."""
        sel = self.promote_ctes(sel.copy())
        if sel.args.get("from_") is None:
            return sel  # constants / scalar sub-queries only: nothing to split (a set-operation side becomes a step)
        if any(sel.find_all(exp.Window)):
            raise _Unsupported("window function")
        self.lift_subqueries(sel)
        items = list(sel.expressions)
        resolve_alias_refs(sel, items)
        later = [*items, *(sel.args["group"].expressions if sel.args.get("group") else []),
                 *([sel.args["having"]] if sel.args.get("having") else []),
                 *(o.this for o in (sel.args["order"].expressions if sel.args.get("order") else []))]
        for e in later:
            for q in outer_nodes(e, exp.Query):
                if not is_star_from_step(q, {n for n, _ in self.steps}):
                    raise _Unsupported("correlated sub-query outside WHERE")
        stars = [s for e in items for s in outer_nodes(e, exp.Star) if not isinstance(s.parent, exp.Count)]
        qual_star = any(isinstance(e, exp.Column) and isinstance(e.this, exp.Star) for e in items)
        if qual_star or (stars and len(items) > 1):
            raise _Unsupported("qualified or mixed star projection")
        grouped = (sel.args.get("group") is not None or bool(sel.args.get("having"))
                   or any(is_aggregate(e) for e in later))
        src, qual, rewrite = self.source_step(sel, later, stars, grouped)
        items = [rewrite(e) for e in items]
        order = [rewrite(o) for o in sel.args["order"].expressions] if sel.args.get("order") else []
        if grouped:
            return self.group_step(sel, items, order, src, qual, rewrite)
        final = exp.Select().from_(exp.Table(this=ident(src)))
        final.set("expressions", [keep_output_name(e, orig) for e, orig in zip(items, sel.expressions)])
        for k in ("distinct", "limit", "offset"):
            final.set(k, sel.args.get(k))
        if order:
            final.set("order", exp.Order(expressions=[qualify(o, qual) for o in order]))
        return final

    def source_step(self, sel: exp.Select, later: list, stars: list, grouped: bool):
        """FROM + JOIN + WHERE step projecting the columns later clauses use, each under a unique alias.

        Returns (FROM of the next step, qualifier for bare columns, column rewrite function). A grouped
        query over one plain table without WHERE reads the table directly (no pass-through step)."""
        base = main_table(sel.args["from_"])
        source = exp.Select(**{k: sel.args.get(k) for k in ("from_", "joins", "where")})
        cols = [c for e in later for c in outer_nodes(e, exp.Column) if not isinstance(c.this, exp.Star)]
        # a bare double-quoted "name" may be a string literal in SQLite: only a projected alias keeps it valid
        quoted_bare = any(not c.table and c.this.quoted for c in cols)
        if grouped and not sel.args.get("where") and not sel.args.get("joins") and not quoted_bare \
                and isinstance(sel.args["from_"].this, exp.Table):
            table = sel.args["from_"].this
            return table, table.alias_or_name, lambda e: e.copy()
        if stars:
            if sel.args.get("joins") and cols:
                raise _Unsupported("SELECT * over joins with other column uses")
            source.set("expressions", [exp.Star()])
            mapping = {col_key(c): c.name for c in cols}
        else:
            mapping, taken = {}, set()
            for c in cols:
                if col_key(c) not in mapping:
                    mapping[col_key(c)] = fresh_alias(c.name, taken, c.table)
                    source.append("expressions", aliased(c.copy(), mapping[col_key(c)]))
            if not mapping:
                source.set("expressions", [exp.Star()])
        suffix = "filtered" if sel.args.get("where") else "joined" if sel.args.get("joins") else "rows"
        src = self.add(f"{base}_{suffix}", source)
        return src, src, lambda e: rewrite_columns(e, mapping)

    def group_step(self, sel: exp.Select, items: list, order: list, src, qual: str, rewrite) -> exp.Select:
        """GROUP BY + HAVING step projecting the SELECT items (and extra ORDER BY keys) under aliases."""
        agg = exp.Select().from_(src.copy() if isinstance(src, exp.Table) else exp.Table(this=ident(src)))
        if sel.args.get("group"):
            agg.set("group", exp.Group(expressions=[qualify(rewrite(g), qual) for g in sel.args["group"].expressions]))
        if sel.args.get("having"):
            agg.set("having", qualify(rewrite(sel.args["having"]), qual))
        base = main_table(sel.args["from_"])
        name = self.add(f"{base}_grouped" if sel.args.get("group") else f"{base}_aggregated", agg)
        taken, outs = set(), []
        for orig, e in zip(sel.expressions, items):
            if isinstance(e, exp.Star):
                outs.append(None)
                agg.append("expressions", e)
                continue
            outs.append(fresh_alias(out_name(orig), taken))
            agg.append("expressions", aliased(e.unalias(), outs[-1]))
        # ORDER BY / LIMIT / DISTINCT stay in the aggregation step: SQLite breaks ties of a sort over an
        # aggregate differently from a sort over a materialised grouped step, so moving them changes
        # which tied row LIMIT keeps. The final query re-applies the ordering (a stable re-sort).
        new_order = []
        for o in order:
            match = [a for a, e in zip(outs, items) if a is not None and e.unalias() == o.this]
            if match:
                alias = match[0]
            elif sel.args.get("distinct"):  # an extra column would change DISTINCT: keep the step's order
                new_order = []
                break
            else:
                alias = fresh_alias(f"order_{out_name(o.this)}", taken)
                agg.append("expressions", aliased(o.this, alias))
            new_order.append(o.__class__(**{**o.args, "this": column(alias, name)}))
        if order:
            agg.set("order", exp.Order(expressions=[qualify(o, qual) for o in order]))
        for k in ("distinct", "limit", "offset"):
            agg.set(k, sel.args.get(k))
        final = exp.Select().from_(exp.Table(this=ident(name)))
        final.set("expressions", [exp.Star() if a is None else keep_output_name(column(a), orig)
                                  for a, orig in zip(outs, sel.expressions)])
        if new_order:
            final.set("order", exp.Order(expressions=new_order))
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


def _body_text(q: exp.Expression) -> str:
    text = q.sql(dialect=_D, pretty=True)
    return text if "\n\n" not in text else q.sql(dialect=_D)


def _render(steps: list[tuple[str, exp.Query]], final: exp.Query) -> str:
    parts = []
    for i, (name, q) in enumerate(steps):
        body = "\n".join("  " + line for line in _body_text(q).split("\n"))
        parts.append(f"{'WITH ' if i == 0 else ''}{ident(name).sql(dialect=_D)} AS (\n{body}\n)")
    return ",\n\n".join(parts) + "\n\n" + _body_text(final)


def _fallback(sql: str, tree: exp.Expression, reason: str) -> CoCTEConversion:
    body = sql.strip().rstrip(";").strip()
    if "\n\n" in body:
        body = tree.sql(dialect=_D)
    name = Namer(tree)("answer")
    indented = "\n".join("  " + line for line in body.split("\n"))
    text = f"WITH {name} AS (\n{indented}\n)\n\nSELECT * FROM {name}"
    return CoCTEConversion(sql=text, fallback=True, reason=reason)


def convert_to_cocte(sql: str) -> CoCTEConversion:
    """Rewrite one SQLite query into a Chain-of-CTEs in the Reward-SQL output format (section 4.1).

    Returns the CoCTE text with ``fallback=True`` (and the reason) when the structured rewrite was not
    possible and the whole query was wrapped in a single CTE. Raises ValueError for unparseable SQL.
    """
    tree = _parse_single(sql)
    if not isinstance(tree, exp.Query):
        raise ValueError(f"to_cocte needs a SELECT query, got a {type(tree).__name__} statement")
    conv = _Converter(Namer(tree))
    try:
        final = conv.query(tree.copy())
        if not conv.steps:
            raise _Unsupported("SELECT without FROM: nothing to split into steps")
        text = _render(conv.steps, final)
        sqlglot.parse_one(text, read=_D)
    except (_Unsupported, SqlglotError) as e:
        return _fallback(sql, tree, str(e))
    return CoCTEConversion(sql=text, fallback=False)


def to_cocte(sql: str) -> str:
    """Deterministic rule-based rewrite of plain SQL into an equivalent Chain-of-CTEs (Reward-SQL section 4.1).

    See the module docstring for the rewrite; ``convert_to_cocte`` also says whether the fallback was used.
    """
    return convert_to_cocte(sql).sql
