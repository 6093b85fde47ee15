"""Deterministic rewrite of plain SQL into an equivalent Chain-of-CTEs (Reward-SQL section 4.1, cold start).

The paper converts gold SQL to CoCTEs with prompted LLMs and keeps the executions that match; this module
is the rule-based counterpart (sqlglot AST rewrite), used to seed cold-start data and tests.

Rewrite of one SELECT (recursively applied to every sub-query that is lifted):
  * uncorrelated sub-queries in WHERE / HAVING (``IN (SELECT ..)``, scalar, EXISTS) and derived tables in
    FROM / JOIN become their own steps, referenced as ``(SELECT * FROM step)`` / ``step AS alias``;
  * step "filtered": FROM + JOIN + WHERE, projecting exactly the columns later clauses need, each under an
    explicit unique alias (no ``SELECT *`` name collisions across joined tables);
  * step "grouped" (only with GROUP BY or aggregates): GROUP BY + HAVING over the filtered step, projecting
    the SELECT items and any extra ORDER BY keys under aliases;
  * final query: SELECT [DISTINCT] over the last step, ORDER BY, LIMIT / OFFSET (so ordering stays top level).
Set operations (UNION / INTERSECT / EXCEPT) convert each side into its own step(s) and combine them with
``SELECT * FROM side`` in the final query. Constructs without a safe rewrite (correlated sub-queries outside
WHERE, qualified ``t.*``, ``*`` over joins with other column uses, window functions, ...) fall back to one
CTE holding the whole query followed by ``SELECT * FROM`` it; ``convert_to_cocte`` reports when it did so.
"""
from __future__ import annotations

import dataclasses
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .cocte import _parse_single

_D = "sqlite"


@dataclasses.dataclass(frozen=True)
class CoCTEConversion:
    """Result of ``convert_to_cocte``: the CoCTE text, whether the single-CTE fallback was used, and why."""

    sql: str
    fallback: bool
    reason: str | None = None


class _Unsupported(Exception):
    """A construct the structured rewrite does not handle; triggers the single-CTE fallback."""


class _Namer:
    """Unique, SQL-safe names that never shadow a table (or CTE) used anywhere in the query."""

    def __init__(self, tree: exp.Expression):
        self.taken = {t.name.lower() for t in tree.find_all(exp.Table)}
        self.taken |= {c.alias.lower() for c in tree.find_all(exp.CTE)}

    def __call__(self, base: str) -> str:
        base = re.sub(r"[^0-9a-zA-Z_]+", "_", base).strip("_") or "step"
        if base[0].isdigit():
            base = f"t_{base}"
        name, i = base, 2
        while name.lower() in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name.lower())
        return name


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=_ident(name), table=_ident(table) if table else None)


def _qualify(e: exp.Expression, table: str) -> exp.Expression:
    """Qualify bare column references with the step name, so a SELECT alias of the same name (which SQLite
    prefers in ORDER BY / GROUP BY) can never capture them."""
    e = e.copy()
    for c in _outer_nodes(e, exp.Column):
        if not c.table and not isinstance(c.this, exp.Star):
            c.set("table", _ident(table))
    return e


def _as(e: exp.Expression, alias: str) -> exp.Expression:
    if isinstance(e, exp.Column) and e.name == alias and not e.table:
        return e
    return exp.alias_(e, _ident(alias))


def _star_from(name: str) -> exp.Select:
    return exp.select("*").from_(exp.Table(this=_ident(name)))


def _is_agg(e: exp.Expression) -> bool:
    return any(isinstance(n, exp.AggFunc) and not _inside_query(n, e) for n in e.walk())


def _inside_query(node: exp.Expression, root: exp.Expression) -> bool:
    """True when ``node`` sits inside a sub-query nested in ``root``."""
    if node is root:
        return False
    p = node.parent
    while p is not None and p is not root:
        if isinstance(p, exp.Query):
            return True
        p = p.parent
    return False


def _outer_nodes(e: exp.Expression, kind) -> list:
    """Nodes of ``kind`` inside ``e`` that are not inside a nested query."""
    return [n for n in e.walk() if isinstance(n, kind) and not _inside_query(n, e)]


def _is_correlated(q: exp.Query) -> bool:
    defined = {t.alias_or_name.lower() for t in q.find_all(exp.Table)}
    defined |= {s.alias.lower() for s in q.find_all(exp.Subquery) if s.alias}
    return any(c.table and c.table.lower() not in defined for c in q.find_all(exp.Column))


def _main_table(q: exp.Expression) -> str:
    t = q.find(exp.Table)
    return t.name if t is not None else "step"


class _Converter:
    def __init__(self, namer: _Namer):
        self.namer = namer
        self.steps: list[tuple[str, exp.Query]] = []

    def add(self, base: str, query: exp.Query) -> str:
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
        final = self.query(q)
        if (isinstance(final, exp.Select) and final.args.get("expressions")
                and all(isinstance(x, exp.Star) for x in final.expressions) and not final.args.get("where")
                and not final.args.get("distinct") and not final.args.get("joins")
                and not any(final.args.get(k) for k in ("group", "having", "order", "limit", "offset"))
                and self.steps and final.args["from_"].this.name == self.steps[-1][0]):
            return self.steps[-1][0]  # final is just SELECT * FROM the last step: reuse it
        return self.add(f"{_main_table(q)}_{suffix}", final)

    def set_operation(self, q: exp.SetOperation) -> exp.Query:
        if q.args.get("with_"):
            raise _Unsupported("WITH inside a set operation")
        out = q.copy()
        for key in ("this", "expression"):
            side = q.args[key]
            if isinstance(side, exp.SetOperation) and not side.args.get("order") and not side.args.get("limit"):
                out.set(key, self.set_operation(side))
            else:
                out.set(key, _star_from(self.materialize(side, "part")))
        return out

    def lift_subqueries(self, sel: exp.Select) -> None:
        holders = [sel.args["from_"], *(sel.args.get("joins") or [])]
        for holder in holders:
            sub = holder.this
            if not isinstance(sub, exp.Subquery):
                continue
            if _is_correlated(sub.this):
                raise _Unsupported("correlated derived table")
            name = self.materialize(sub.this, "derived")
            table = exp.Table(this=_ident(name))
            if sub.alias:
                table.set("alias", exp.TableAlias(this=_ident(sub.alias)))
            sub.replace(table)
        for key in ("where", "having"):
            clause = sel.args.get(key)
            if clause is None:
                continue
            for q in _outer_nodes(clause, exp.Query):
                target = q.this if isinstance(q, exp.Subquery) else q
                if _is_correlated(target):
                    continue
                target.replace(_star_from(self.materialize(target, "subquery")))

    def select(self, sel: exp.Select) -> exp.Query:
        sel = sel.copy()
        with_ = sel.args.get("with_")
        if with_ is not None:
            for cte in with_.expressions:
                if cte.args.get("alias") is not None and cte.args["alias"].columns or with_.args.get("recursive"):
                    raise _Unsupported("CTE with a column list or RECURSIVE")
                self.steps.append((cte.alias, cte.this))
            sel.set("with_", None)
        if sel.args.get("from_") is None:
            raise _Unsupported("SELECT without FROM")
        if any(sel.find_all(exp.Window)):
            raise _Unsupported("window function")
        self.lift_subqueries(sel)
        items = list(sel.expressions)
        _resolve_order_refs(sel, items)
        later = [*items, *(sel.args["group"].expressions if sel.args.get("group") else []),
                 *([sel.args["having"]] if sel.args.get("having") else []),
                 *(o.this for o in (sel.args["order"].expressions if sel.args.get("order") else []))]
        for e in later:
            for q in _outer_nodes(e, exp.Query):
                if not _is_star_from_step(q, {n for n, _ in self.steps}):
                    raise _Unsupported("correlated sub-query outside WHERE")
        stars = [s for e in items for s in _outer_nodes(e, exp.Star) if not isinstance(s.parent, exp.Count)]
        qual_star = any(isinstance(e, exp.Column) and isinstance(e.this, exp.Star) for e in items)
        if qual_star or (stars and len(items) > 1):
            raise _Unsupported("qualified or mixed star projection")
        base = _main_table(sel.args["from_"])
        source = exp.Select(**{k: sel.args.get(k) for k in ("from_", "joins", "where")})
        cols = [c for e in later for c in _outer_nodes(e, exp.Column) if not isinstance(c.this, exp.Star)]
        if stars:
            if sel.args.get("joins") and cols:
                raise _Unsupported("SELECT * over joins with other column uses")
            source.set("expressions", [exp.Star()])
            mapping = {_key(c): c.name for c in cols}
        else:
            mapping = {}
            taken: set[str] = set()
            for c in cols:
                k = _key(c)
                if k in mapping:
                    continue
                alias = _fresh(c.name, taken, c.table)
                mapping[k] = alias
                source.append("expressions", _as(c.copy(), alias))
            if not mapping:
                source.set("expressions", [exp.Star()])
        suffix = "filtered" if sel.args.get("where") else "joined" if sel.args.get("joins") else "rows"
        src = self.add(f"{base}_{suffix}", source)
        items = [_rewrite(e, mapping) for e in items]
        order = sel.args.get("order")
        order = [_rewrite(o, mapping) for o in order.expressions] if order else []
        grouped = sel.args.get("group") is not None or any(_is_agg(e) for e in items)
        grouped = grouped or bool(sel.args.get("having")) or any(_is_agg(o.this) for o in order)
        final = exp.Select().from_(exp.Table(this=_ident(src)))
        if grouped:
            agg = exp.Select().from_(exp.Table(this=_ident(src)))
            if sel.args.get("group"):
                agg.set("group", exp.Group(expressions=[_qualify(_rewrite(g, mapping), src)
                                                        for g in sel.args["group"].expressions]))
            if sel.args.get("having"):
                agg.set("having", _qualify(_rewrite(sel.args["having"], mapping), src))
            name = self.add(f"{base}_grouped" if sel.args.get("group") else f"{base}_aggregated", agg)
            taken, outs = set(), []
            for orig, e in zip(sel.expressions, items):
                if isinstance(e, exp.Star):
                    outs.append(None)
                    agg.append("expressions", e)
                    continue
                alias = _fresh(_out_name(orig), taken)
                outs.append(alias)
                agg.append("expressions", _as(e.unalias(), alias))
            # ORDER BY / LIMIT / DISTINCT stay in the aggregation step: SQLite breaks ties of a sort over an
            # aggregate differently from a sort over a materialised grouped step, so moving them changes
            # which tied row LIMIT keeps. The final query re-applies the ordering (a stable re-sort).
            new_order = []
            for o in order:
                match = [a for a, e in zip(outs, items) if e.unalias() == o.this]
                if match:
                    alias = match[0]
                else:
                    alias = _fresh(f"order_{_out_name(o.this)}", taken)
                    agg.append("expressions", _as(o.this, alias))
                new_order.append(o.__class__(**{**o.args, "this": _col(alias, name)}))
            if order:
                agg.set("order", exp.Order(expressions=[_qualify(o, src) for o in order]))
            for k in ("distinct", "limit", "offset"):
                agg.set(k, sel.args.get(k))
            final = exp.Select().from_(exp.Table(this=_ident(name)))
            items = [exp.Star() if a is None else _named(_col(a), orig) for a, orig in zip(outs, sel.expressions)]
            if new_order:
                final.set("order", exp.Order(expressions=new_order))
            final.set("expressions", items)
            return final
        items = [_named(e, orig) for e, orig in zip(items, sel.expressions)]
        final.set("expressions", items)
        for k in ("distinct", "limit", "offset"):
            final.set(k, sel.args.get(k))
        if order:
            final.set("order", exp.Order(expressions=[_qualify(o, src) for o in order]))
        return final


def _is_star_from_step(q: exp.Expression, steps: set[str]) -> bool:
    q = q.this if isinstance(q, exp.Subquery) else q
    return (isinstance(q, exp.Select) and len(q.expressions) == 1 and isinstance(q.expressions[0], exp.Star)
            and q.args.get("from_") is not None and q.args["from_"].this.name in steps
            and not q.args.get("where") and not q.args.get("joins"))


def _key(c: exp.Column) -> tuple[str, str]:
    return (c.table.lower(), c.name.lower())


def _fresh(name: str, taken: set[str], table: str = "") -> str:
    cand = re.sub(r"[^0-9a-zA-Z_]+", "_", name).strip("_") or "col"
    if cand[0].isdigit():
        cand = f"c_{cand}"
    if cand.lower() in taken and table:
        cand = f"{re.sub(r'[^0-9a-zA-Z_]+', '_', table)}_{cand}"
    base, i = cand, 2
    while cand.lower() in taken:
        cand, i = f"{base}_{i}", i + 1
    taken.add(cand.lower())
    return cand


def _out_name(e: exp.Expression) -> str:
    """Readable alias for a SELECT item: its alias, its column name, or e.g. count_star / avg_age."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name if not isinstance(e.this, exp.Star) else "all"
    if isinstance(e, exp.Func):
        fname = e.sql_name().lower() if hasattr(e, "sql_name") else type(e).__name__.lower()
        arg = e.find(exp.Column)
        return f"{fname}_{arg.name if arg is not None else 'star'}"
    return "value"


def _rewrite(e: exp.Expression, mapping: dict) -> exp.Expression:
    """Column references (outside sub-queries) -> unqualified references to the source step's aliases."""
    e = e.copy()
    for c in _outer_nodes(e, exp.Column):
        if isinstance(c.this, exp.Star):
            continue
        alias = mapping.get(_key(c), c.name)
        new = _col(alias)
        if c is e:
            return new
        c.replace(new)
    return e


def _named(e: exp.Expression, orig: exp.Expression) -> exp.Expression:
    """Keep the original output column name where it is a plain column or an explicit alias."""
    want = orig.alias if isinstance(orig, exp.Alias) else orig.name if isinstance(orig, exp.Column) else None
    inner = e.unalias()
    if want and not (isinstance(inner, exp.Column) and inner.name == want):
        return exp.alias_(inner, _ident(want))
    return inner


def _resolve_order_refs(sel: exp.Select, items: list) -> None:
    """ORDER BY <select alias> / ORDER BY <position> -> the referenced SELECT expression (SQLite semantics)."""
    order = sel.args.get("order")
    if not order:
        return
    aliases = {e.alias.lower(): e.this for e in items if isinstance(e, exp.Alias)}
    for o in order.expressions:
        t = o.this
        if isinstance(t, exp.Column) and not t.table and t.name.lower() in aliases:
            o.set("this", aliases[t.name.lower()].copy())
        elif isinstance(t, exp.Literal) and t.is_int and 1 <= int(t.this) <= len(items):
            o.set("this", items[int(t.this) - 1].unalias().copy())


def _body_text(q: exp.Expression) -> str:
    text = q.sql(dialect=_D, pretty=True)
    return text if "\n\n" not in text else q.sql(dialect=_D)


def _render(steps: list[tuple[str, exp.Query]], final: exp.Query) -> str:
    parts = []
    for i, (name, q) in enumerate(steps):
        body = "\n".join("  " + line for line in _body_text(q).split("\n"))
        parts.append(f"{'WITH ' if i == 0 else ''}{_ident(name).sql(dialect=_D)} AS (\n{body}\n)")
    return ",\n\n".join(parts) + "\n\n" + _body_text(final)


def _fallback(sql: str, tree: exp.Expression, reason: str) -> CoCTEConversion:
    body = sql.strip().rstrip(";").strip()
    if "\n\n" in body:
        body = tree.sql(dialect=_D)
    name = _Namer(tree)("answer")
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
    conv = _Converter(_Namer(tree))
    try:
        final = conv.query(tree.copy())
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
