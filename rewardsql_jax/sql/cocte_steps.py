"""Per-operation step builders of the Chain-of-CTEs rewrite (Reward-SQL section 4.1 cold start, Figure 7).

Figure 7's conversion prompt asks for one CTE per logical operation: its example first selects the rows of
each table (``All_Star_Players``), then joins them (``All_Star_Team_Associations``), then aggregates and
filters the groups (``Teams_With_Three_All_Stars``), and the final query reads the last step. The builders
here produce those steps from a sqlglot SELECT; ``to_cocte._Converter`` calls them in logical order:

  * ``push_down_filters`` -- a JOIN query's WHERE conditions that read one inner-joined table become that
    table's own filter step, joined in place of the table (Figure 7 ``All_Star_Players``; section B.1's case
    study builds "schools in LA" and "schools in the test range" as separate CTEs);
  * ``column_steps`` -- the columns a query reads from each table, as a step (only used to give a
    single-operation query a second step; Figure 7 ``All_Star_Players`` is such a projection);
  * ``source_step`` -- FROM + JOIN + WHERE; each AND-ed condition of a single-table WHERE, and the WHERE of a
    join whose conditions could not be pushed down, become filter steps of their own after the first;
  * ``group_step`` -- GROUP BY / aggregates; HAVING becomes a filter step over the grouped step;
  * ``top_k_step`` -- ORDER BY + LIMIT of a non-aggregated query (the final query re-sorts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from .cocte_ast import (
    aliased,
    col_key,
    column,
    fresh_alias,
    ident,
    is_star_from_step,
    keep_output_name,
    main_table,
    out_name,
    outer_nodes,
    qualify,
    rewrite_columns,
)

_ROWID = {"rowid", "oid", "_rowid_"}


class Unsupported(Exception):
    """A construct the structured rewrite does not handle; triggers the single-CTE fallback. ``code`` is a
    short reason code (``window_function``, ``correlated_subquery``, ...) for reports."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The AND-ed conditions of ``e`` (through parentheses), in textual order."""
    while isinstance(e, exp.Paren) and isinstance(e.this, exp.And):
        e = e.this
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    """``p1 AND p2 AND ...`` (None for no parts); OR-ed parts are parenthesised."""
    out = None
    for p in parts:
        p = exp.Paren(this=p.copy()) if isinstance(p, exp.Or) else p.copy()
        out = p if out is None else exp.And(this=out, expression=p)
    return out


def _step_table(name: str, alias: str) -> exp.Table:
    return exp.Table(this=ident(name), alias=exp.TableAlias(this=ident(alias)))


def _reads_lifted_only(e: exp.Expression, steps: set[str]) -> bool:
    """True when every query nested in ``e`` is an already lifted ``SELECT * FROM <step>``."""
    return all(is_star_from_step(q, steps) for q in outer_nodes(e, exp.Query))


def _has_unlifted(sel: exp.Select, steps: set[str]) -> bool:
    """True when ``sel`` nests a query other than a lifted ``SELECT * FROM <step>`` (a correlated one)."""
    return any(q is not sel and not is_star_from_step(q, steps) for q in sel.find_all(exp.Query))


def _column_uses(sel: exp.Select) -> list[exp.Column]:
    return [c for c in sel.find_all(exp.Column) if not isinstance(c.this, exp.Star)]


def _projection(cols: list[exp.Column], alias: str | None) -> list[exp.Column]:
    """Distinct (case-insensitive) column references, qualified with ``alias`` when given."""
    seen, out = set(), []
    for c in cols:
        if c.name.lower() not in seen:
            seen.add(c.name.lower())
            out.append(exp.Column(this=c.this.copy(), table=ident(alias) if alias else None))
    return out


class StepBuilder:
    """Mixin of ``_Converter``: needs ``self.add(base, query) -> name``, ``self.steps``, ``self.origin``
    ({per-table step: table}) and ``self.schema`` (``{table (lower): {column (lower)}}`` or None)."""

    steps: list[tuple[str, exp.Query]]
    origin: dict[str, str]
    schema: dict | None

    if TYPE_CHECKING:

        def add(self, base: str, query: exp.Query) -> str: ...

    def step_names(self) -> set[str]:
        return {n for n, _ in self.steps}

    def base_name(self, q: exp.Expr) -> str:
        """Name for the steps of ``q``: its first table, or the table a per-table step stands for."""
        name = main_table(q)
        return self.origin.get(name, name)

    def table_step(self, holder: exp.Expression, table: exp.Table, suffix: str, step: exp.Select) -> None:
        """Add ``step`` for ``table`` and read it in the table's place, under the table's alias."""
        name = self.add(f"{table.name}_{suffix}", step)
        self.origin[name] = table.name
        holder.set("this", _step_table(name, table.alias_or_name))

    def _tables(self, sel: exp.Select):
        """{alias (lower): FROM/JOIN holder} when every source is a plain table (or step), else None."""
        holders = [sel.args["from_"], *(sel.args.get("joins") or [])]
        if not all(isinstance(h.this, exp.Table) for h in holders):
            return None
        out = {h.this.alias_or_name.lower(): h for h in holders}
        return out if len(out) == len(holders) else None

    def _needs_star(self, sel: exp.Select, stars: list) -> bool:
        """A per-table step must keep every column (``*``) when some use cannot be attributed to a table."""
        joins = sel.args.get("joins") or []
        return (
            bool(stars)
            or any(j.args.get("using") or j.args.get("method") for j in joins)
            or any(not c.table for c in _column_uses(sel))
            or _has_unlifted(sel, self.step_names())
        )

    def push_down_filters(self, sel: exp.Select, stars: list) -> bool:
        """WHERE conditions of a join that read only one inner-side table -> a filter step on that table.

        The table is replaced by the step under the same alias; the rest of the WHERE stays. Tables on the
        null-supplying side of a LEFT JOIN keep their conditions (a pushed-down filter would keep unmatched
        rows); RIGHT / FULL joins are left alone. Returns True when some condition was pushed down."""
        joins = sel.args.get("joins") or []
        where = sel.args.get("where")
        tables = self._tables(sel) if joins and where is not None else None
        if where is None or tables is None or any(j.args.get("side") in ("RIGHT", "FULL") for j in joins):
            return False
        nullable = {j.this.alias_or_name.lower() for j in joins if j.args.get("side")}
        pushed: dict[str, list] = {}
        rest = []
        for cond in conjuncts(where.this):
            cols = outer_nodes(cond, exp.Column)
            quals = {c.table.lower() for c in cols}
            if (
                cols
                and all(c.table for c in cols)
                and len(quals) == 1
                and next(iter(quals)) in tables
                and not quals & nullable
                and not any(c.name.lower() in _ROWID for c in cols)
                and _reads_lifted_only(cond, self.step_names())
            ):
                pushed.setdefault(next(iter(quals)), []).append(cond)
            else:
                rest.append(cond)
        if not pushed:
            return False
        sel.set("where", exp.Where(this=and_all(rest)) if rest else None)
        star = self._needs_star(sel, stars)
        for qual, conds in pushed.items():
            table = tables[qual].this
            cols = [] if star else [c for c in _column_uses(sel) if c.table.lower() == qual]
            step = exp.Select(expressions=_projection(cols, table.alias_or_name) or [exp.Star()])
            step = step.from_(table.copy()).where(and_all(conds))
            self.table_step(tables[qual], table, "filtered", step)
        return True

    def column_steps(self, sel: exp.Select, stars: list, grouped: bool) -> str | None:
        """Each table's referenced columns -> a projection step read in place of the table (Figure 7's
        ``All_Star_Players``). Only for a query with no other second operation; needs every column use to be
        attributable (single table, or all columns qualified in a join) and no ``*`` projection; with a known
        schema, a table whose every column is used keeps no such step (it would only copy the table).

        Returns None when a step was added, else a reason code for the single-step result."""
        tables = self._tables(sel)
        if not (grouped or sel.args.get("where") or sel.args.get("joins") or sel.args.get("limit")):
            return "no_operation"  # the next step would only re-project the columns step
        if stars:
            return "star_projection"
        if tables is None or _has_unlifted(sel, self.step_names()):
            return "correlated_subquery"
        if sel.args.get("joins") and self._needs_star(sel, []):
            return "unqualified_join_columns"
        single = len(tables) == 1
        reason: str | None = "whole_table_used"
        for qual, holder in tables.items():
            table = holder.this
            cols = [c for c in _column_uses(sel) if (single and not c.table) or c.table.lower() == qual]
            if not cols or any(c.name.lower() in _ROWID for c in cols):
                continue
            known = (self.schema or {}).get(table.name.lower())
            if known is not None and {c.name.lower() for c in cols} >= known:
                continue  # it would copy the whole table: not a step
            step = exp.Select(expressions=_projection(cols, None if single else table.alias_or_name))
            self.table_step(holder, table, "columns", step.from_(table.copy()))
            reason = None
        return reason

    def source_step(self, sel: exp.Select, later: list, stars: list, direct: bool, pushed: bool):
        """FROM + JOIN + WHERE step(s) projecting the columns later clauses use, each under a unique alias.

        Single-table WHERE: the first AND-ed condition (with any correlated one) filters the table, each
        further condition is its own filter step. A join whose WHERE was not pushed down: the join step, then
        one filter step per condition. Returns (FROM of the next step, qualifier for bare columns, column
        rewrite function). With ``direct`` (grouped or top-k next) a query over one plain table without WHERE
        gets no step here: the next step reads the table itself."""
        base = self.base_name(sel.args["from_"])
        joins, where = sel.args.get("joins"), sel.args.get("where")
        first, rest = (where.this if where else None), []
        if where is not None and not (joins and (pushed or stars)):
            parts = conjuncts(where.this)
            inline = [p for p in parts if not _reads_lifted_only(p, self.step_names())]
            plain = [p for p in parts if _reads_lifted_only(p, self.step_names())]
            if joins and not inline:
                first, rest = None, plain
            elif not joins and len(parts) > 1 and plain:
                first, rest = (and_all(inline), plain) if inline else (plain[0], plain[1:])
        source = exp.Select(**{k: sel.args.get(k) for k in ("from_", "joins")})
        if first is not None:
            source.set("where", exp.Where(this=first))
        cols = [c for e in [*later, *rest] for c in outer_nodes(e, exp.Column) if not isinstance(c.this, exp.Star)]
        # a bare double-quoted "name" may be a string literal in SQLite: only a projected alias keeps it valid
        quoted_bare = any(not c.table and c.this.quoted for c in cols)
        if direct and not where and not joins and not quoted_bare and isinstance(sel.args["from_"].this, exp.Table):
            table = sel.args["from_"].this
            return table, table.alias_or_name, lambda e: e.copy()
        if stars:
            if joins and cols:
                raise Unsupported("SELECT * over joins with other column uses", "star_over_join")
            source.set("expressions", [exp.Star()])
            mapping = {col_key(c): c.name for c in cols}
        else:
            mapping, taken = {}, set[str]()
            for c in cols:
                if col_key(c) not in mapping:
                    mapping[col_key(c)] = fresh_alias(c.name, taken, c.table)
                    source.append("expressions", aliased(c.copy(), mapping[col_key(c)]))
            if not mapping:
                source.set("expressions", [exp.Star()])
        suffix = "joined" if joins else "filtered" if first is not None else "rows"
        src = self.add(f"{base}_{suffix}", source)
        for i, cond in enumerate(rest):
            needed = {
                mapping[col_key(c)]
                for e in [*later, *rest[i + 1 :]]
                for c in outer_nodes(e, exp.Column)
                if col_key(c) in mapping
            }
            proj = [column(a) for a in dict.fromkeys(mapping.values()) if a in needed] if not stars else []
            step = exp.Select(expressions=proj or [exp.Star()]).from_(exp.Table(this=ident(src)))
            src = self.add(f"{base}_filtered", step.where(qualify(rewrite_columns(cond, mapping), src)))
        return src, src, lambda e: rewrite_columns(e, mapping)

    def top_k_step(self, sel: exp.Select, items: list, order: list, src, qual: str) -> str:
        """ORDER BY + LIMIT (+ OFFSET) over ``src`` (a step name, or the one table of ``sel``) -> a step
        keeping the columns the final query reads, by their bare names."""
        needed = [c for e in [*items, *(o.this for o in order)] for c in outer_nodes(e, exp.Column)]
        proj = [] if any(isinstance(e, exp.Star) for e in items) else _projection(needed, None)
        step = exp.Select(expressions=proj or [exp.Star()])
        step = step.from_(src.copy() if isinstance(src, exp.Table) else exp.Table(this=ident(src)))
        if order:
            step.set("order", exp.Order(expressions=[qualify(o, qual) for o in order]))
        for k in ("limit", "offset"):
            step.set(k, sel.args.get(k))
        return self.add(f"{self.base_name(sel.args['from_'])}_top", step)

    def group_step(self, sel: exp.Select, items: list, order: list, src, qual: str, rewrite) -> exp.Select:
        """GROUP BY step projecting the SELECT items (and extra ORDER BY keys) under aliases; HAVING becomes a
        filter step over it (its aggregates projected by the grouped step) unless DISTINCT, LIMIT or ``*`` is
        used (a LIMIT after HAVING must sort in the aggregation step: see the tie note below)."""
        agg = exp.Select().from_(src.copy() if isinstance(src, exp.Table) else exp.Table(this=ident(src)))
        if sel.args.get("group"):
            agg.set("group", exp.Group(expressions=[qualify(rewrite(g), qual) for g in sel.args["group"].expressions]))
        having = sel.args.get("having")
        split = (
            having is not None
            and not any(sel.args.get(k) for k in ("distinct", "limit", "offset"))
            and not any(isinstance(e, exp.Star) for e in items)
        )
        if having is not None and not split:
            agg.set("having", qualify(rewrite(having), qual))
        base = self.base_name(sel.args["from_"])
        name = self.add(f"{base}_grouped" if sel.args.get("group") else f"{base}_aggregated", agg)
        taken, outs = set[str](), list[str | None]()
        for orig, e in zip(sel.expressions, items):
            if isinstance(e, exp.Star):
                outs.append(None)
                agg.append("expressions", e)
                continue
            out = fresh_alias(out_name(orig), taken)
            outs.append(out)
            agg.append("expressions", aliased(e.unalias(), out))
        last, known = agg, [(e.unalias(), a) for a, e in zip(outs, items) if a is not None]
        if split and having is not None:
            grouped = name
            cond = self._project_parts(rewrite(having.this), agg, known, taken, qual, name)
            # split: no ``*`` item, so every output has an alias
            last = exp.Select(expressions=[column(a) for a in outs if a is not None]).from_(exp.Table(this=ident(name)))
            last = last.where(cond)
            name = self.add(f"{base}_having", last)
        # ORDER BY / LIMIT / DISTINCT stay in the aggregation (or HAVING) step: SQLite breaks ties of a sort over
        # an aggregate differently from a sort over a materialised grouped step, so moving them changes which
        # tied row LIMIT keeps. The final query re-applies the ordering (a stable re-sort).
        new_order: list[exp.Expr] = []
        for o in order:
            match = [a for e, a in known if e == o.this]
            if match:
                alias = match[0]
                if last is not agg and alias not in outs:
                    last.append("expressions", column(alias))
            elif sel.args.get("distinct"):  # an extra column would change DISTINCT: keep the step's order
                new_order = []
                break
            else:
                alias = fresh_alias(f"order_{out_name(o.this)}", taken)
                agg.append("expressions", aliased(qualify(o.this, qual), alias))
                known.append((o.this, alias))
                if last is not agg:
                    last.append("expressions", column(alias))
            new_order.append(o.__class__(**{**o.args, "this": column(alias, name)}))
        if order:
            last.set(
                "order",
                exp.Order(
                    expressions=[qualify(o, qual) for o in order]
                    if last is agg
                    else [o.__class__(**{**o.args, "this": column(o.this.name, grouped)}) for o in new_order]
                ),
            )
        for k in ("distinct", "limit", "offset"):
            last.set(k, sel.args.get(k))
        final = exp.Select().from_(exp.Table(this=ident(name)))
        final.set(
            "expressions",
            [exp.Star() if a is None else keep_output_name(column(a), orig) for a, orig in zip(outs, sel.expressions)],
        )
        if new_order:
            final.set("order", exp.Order(expressions=new_order))
        return final

    @staticmethod
    def _project_parts(cond, agg, known, taken, qual, name):
        """HAVING condition -> a WHERE over the grouped step: each aggregate (and each column outside one)
        becomes a column of ``agg`` (the alias of an equal projected expression in ``known``, else a new
        ``having_*`` alias, recorded in ``known``)."""
        cond = cond.copy()
        targets = [
            n
            for n in cond.walk(bfs=True)
            if (isinstance(n, exp.AggFunc) or isinstance(n, exp.Column) and not isinstance(n.this, exp.Star))
            and not any(isinstance(p, exp.AggFunc) for p in _parents(n, cond))
        ]
        for t in targets:
            match = [a for e, a in known if e == t]
            if match:
                alias = match[0]
            else:
                alias = fresh_alias(f"having_{out_name(t)}", taken)
                agg.append("expressions", aliased(qualify(t, qual), alias))
                known.append((t.copy(), alias))
            ref = column(alias, name)
            if t is cond:
                return ref
            t.replace(ref)
        return cond


def _parents(node: exp.Expression, root: exp.Expression):
    p = node.parent
    while p is not None and node is not root:
        yield p
        if p is root:
            return
        p = p.parent
