"""sqlglot AST helpers for the Chain-of-CTEs rewrite (``to_cocte``): scoping, naming, column rewriting."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp


class Namer:
    """Unique, SQL-safe names that never shadow a table (or CTE) used anywhere in the query."""

    def __init__(self, tree: exp.Expr):
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


_KEYWORDS = {
    w for k in sqlglot.Dialect.get_or_raise("sqlite").tokenizer_class.KEYWORDS for w in k.split() if w.isalpha()
}


def ident(name: str) -> exp.Identifier:
    """Identifier for a generated or copied name, quoted when it is not a plain word or is a keyword
    (``order``, ``group``, ...)."""
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name.upper() not in _KEYWORDS
    return exp.Identifier(this=name, quoted=not plain)


def column(name: str, table: str | None = None) -> exp.Column:
    """Column reference ``table.name`` (or bare ``name``) with identifiers quoted when needed."""
    return exp.Column(this=ident(name), table=ident(table) if table else None)


def qualify(e: exp.Expression, table: str) -> exp.Expression:
    """Qualify bare column references with the step name, so a SELECT alias of the same name (which SQLite
    prefers in ORDER BY / GROUP BY) can never capture them."""
    e = e.copy()
    for c in outer_nodes(e, exp.Column):
        if not c.table and not isinstance(c.this, exp.Star):
            c.set("table", ident(table))
    return e


def aliased(e: exp.Expr, alias: str) -> exp.Expr:
    """``e AS alias``, or ``e`` itself when it already is the bare column ``alias``."""
    if isinstance(e, exp.Column) and e.name == alias and not e.table:
        return e
    return exp.alias_(e, ident(alias))


def star_from(name: str) -> exp.Select:
    """``SELECT * FROM name``: how a lifted sub-query reads its step."""
    return exp.select("*").from_(exp.Table(this=ident(name)))


def is_aggregate(e: exp.Expression) -> bool:
    """True when ``e`` contains an aggregate function outside any nested query."""
    return any(isinstance(n, exp.AggFunc) and not inside_query(n, e) for n in e.walk())


def inside_query(node: exp.Expr, root: exp.Expr) -> bool:
    """True when ``node`` sits inside a sub-query nested in ``root``."""
    if node is root:
        return False
    p = node.parent
    while p is not None and p is not root:
        if isinstance(p, exp.Query):
            return True
        p = p.parent
    return False


def outer_nodes(e: exp.Expr, kind) -> list:
    """Nodes of ``kind`` inside ``e`` that are not inside a nested query."""
    return [n for n in e.walk(bfs=False) if isinstance(n, kind) and not inside_query(n, e)]


def is_correlated(q: exp.Query) -> bool:
    """True when ``q`` qualifies a column with a table it does not define itself (an outer reference).

    Unqualified outer references cannot be told apart without the schema and count as uncorrelated."""
    defined = {t.alias_or_name.lower() for t in q.find_all(exp.Table)}
    defined |= {s.alias.lower() for s in q.find_all(exp.Subquery) if s.alias}
    return any(c.table and c.table.lower() not in defined for c in q.find_all(exp.Column))


def main_table(q: exp.Expr) -> str:
    """Name of the first table in ``q`` (used to name its steps)."""
    t = q.find(exp.Table)
    return t.name if t is not None else "step"


def is_star_from_step(q: exp.Expr, steps: set[str]) -> bool:
    """True for ``SELECT * FROM <step>`` (possibly parenthesised): an already lifted sub-query."""
    q = q.this if isinstance(q, exp.Subquery) else q
    return (
        isinstance(q, exp.Select)
        and len(q.expressions) == 1
        and isinstance(q.expressions[0], exp.Star)
        and q.args.get("from_") is not None
        and q.args["from_"].this.name in steps
        and not q.args.get("where")
        and not q.args.get("joins")
    )


def col_key(c: exp.Column) -> tuple[str, str]:
    """Case-insensitive identity (qualifier, name) of a column reference."""
    return (c.table.lower(), c.name.lower())


def fresh_alias(name: str, taken: set[str], table: str = "") -> str:
    """A SQL-safe alias derived from ``name`` that is not in ``taken`` (case-insensitive); records it."""
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


def out_name(e: exp.Expression) -> str:
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


def rewrite_columns(e: exp.Expression, mapping: dict) -> exp.Expression:
    """Column references (outside sub-queries) -> unqualified references to the source step's aliases."""
    e = e.copy()
    for c in outer_nodes(e, exp.Column):
        if isinstance(c.this, exp.Star):
            continue
        alias = mapping.get(col_key(c), c.name)
        new = column(alias)
        if c is e:
            return new
        c.replace(new)
    return e


def keep_output_name(e: exp.Expr, orig: exp.Expr) -> exp.Expr:
    """Keep the original output column name where it is a plain column or an explicit alias."""
    want = orig.alias if isinstance(orig, exp.Alias) else orig.name if isinstance(orig, exp.Column) else None
    inner = e.unalias()
    if want and not (isinstance(inner, exp.Column) and inner.name == want):
        return exp.alias_(inner, ident(want))
    return inner


def resolve_alias_refs(sel: exp.Select, items: list) -> None:
    """Bare references to a SELECT alias (ORDER BY / GROUP BY / HAVING) and ORDER BY / GROUP BY positions
    -> the referenced SELECT expression, as SQLite resolves them; the steps no longer share one SELECT list."""
    aliases = {e.alias.lower(): e.this for e in items if isinstance(e, exp.Alias)}

    def resolve(t: exp.Expression, positional: bool) -> exp.Expression:
        if isinstance(t, exp.Column) and not t.table and t.name.lower() in aliases:
            return aliases[t.name.lower()].copy()
        if positional and isinstance(t, exp.Literal) and t.is_int and 1 <= int(t.this) <= len(items):
            return items[int(t.this) - 1].unalias().copy()
        for c in outer_nodes(t, exp.Column):
            if c is not t and not c.table and c.name.lower() in aliases:
                c.replace(aliases[c.name.lower()].copy())
        return t

    for o in sel.args["order"].expressions if sel.args.get("order") else []:
        o.set("this", resolve(o.this, True))
    if sel.args.get("group"):
        sel.args["group"].set("expressions", [resolve(g, True) for g in sel.args["group"].expressions])
    if sel.args.get("having"):
        sel.args["having"].set("this", resolve(sel.args["having"].this, False))
