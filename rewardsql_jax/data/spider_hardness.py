"""Spider hardness levels (easy / medium / hard / extra).

`spider_hardness(sql_tree)` reimplements `Evaluator.eval_hardness` of the official Spider
`evaluation.py` (taoyds/spider) on the parsed `sql` tree stored in Spider's question files,
quirks included (e.g. `count_agg` over a HAVING list also counts its 'and'/'or' tokens, and a
NOT on a WHERE condition counts as an aggregate), so the dev split gives the official counts.

`approx_spider_hardness(sql)` is for question files without a `sql` tree (Spider-Syn, Spider-DK):
the same three counts are read off a sqlglot parse of the SQL text instead. It is an
approximation: Spider's own parser flattens conditions differently in corner cases
(parenthesised OR groups, joins without ON, subqueries in FROM). On Spider dev it gives the
official level for all 1034 questions (checked in tests/data/test_spider_hardness.py), but that
is agreement on one split, not a proof of equivalence.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

LEVELS = ("easy", "medium", "hard", "extra")

_WHERE_OPS = ("not", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists")
_LIKE = _WHERE_OPS.index("like")
_AGG_NONE = 0


def _has_agg(unit) -> bool:
    # Official code: unit[0] != AGG_OPS.index('none'); on a condition list the 'and'/'or' strings
    # and the not_op flag pass through here too, which is part of the official behaviour.
    return unit[0] != _AGG_NONE


def _count_agg(units) -> int:
    return sum(1 for unit in units if _has_agg(unit))


def _nested(sql: dict) -> list:
    nested = []
    for cond_unit in sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]:
        if isinstance(cond_unit[3], dict):
            nested.append(cond_unit[3])
        if isinstance(cond_unit[4], dict):
            nested.append(cond_unit[4])
    for key in ("intersect", "except", "union"):
        if sql[key] is not None:
            nested.append(sql[key])
    return nested


def _component1(sql: dict) -> int:
    count = int(len(sql["where"]) > 0) + int(len(sql["groupBy"]) > 0) + int(len(sql["orderBy"]) > 0)
    count += int(sql["limit"] is not None)
    if len(sql["from"]["table_units"]) > 0:
        count += len(sql["from"]["table_units"]) - 1
    ao = sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]
    count += sum(1 for token in ao if token == "or")
    cond_units = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    count += sum(1 for cond_unit in cond_units if cond_unit[1] == _LIKE)
    return count


def _others(sql: dict) -> int:
    agg = _count_agg(sql["select"][1]) + _count_agg(sql["where"][::2]) + _count_agg(sql["groupBy"])
    if len(sql["orderBy"]) > 0:
        units = sql["orderBy"][1]
        agg += _count_agg([u[1] for u in units if u[1]] + [u[2] for u in units if u[2]])
    agg += _count_agg(sql["having"])
    count = int(agg > 1)
    count += int(len(sql["select"][1]) > 1)
    count += int(len(sql["where"]) > 1)
    count += int(len(sql["groupBy"]) > 1)
    return count


def hardness_from_counts(comp1: int, comp2: int, others: int) -> str:
    """The official decision rule mapping (component1, component2, others) to a level."""
    if comp1 <= 1 and others == 0 and comp2 == 0:
        return "easy"
    if (others <= 2 and comp1 <= 1 and comp2 == 0) or (comp1 <= 2 and others < 2 and comp2 == 0):
        return "medium"
    if (
        (others > 2 and comp1 <= 2 and comp2 == 0)
        or (2 < comp1 <= 3 and others <= 2 and comp2 == 0)
        or (comp1 <= 1 and others == 0 and comp2 <= 1)
    ):
        return "hard"
    return "extra"


def spider_hardness(sql_tree: dict) -> str:
    """Official Spider hardness of a parsed `sql` tree (the `sql` field of Spider's dev.json)."""
    return hardness_from_counts(_component1(sql_tree), len(_nested(sql_tree)), _others(sql_tree))


# ---------------------------------------------------------------- sqlglot approximation


def _own_nodes(node: exp.Expression | None, kind):
    """Nodes of `kind` under `node` that belong to the same query level (not inside a subquery)."""
    if node is None:
        return []
    found = []
    for sub in node.walk(prune=lambda n: n is not node and isinstance(n, (exp.Select, exp.SetOperation))):
        if isinstance(sub, kind):
            found.append(sub)
    return found


def _conditions(node: exp.Expr | None) -> list[exp.Expr]:
    """Flatten AND/OR into the list of atomic conditions, as Spider's parser does."""
    if node is None:
        return []
    if isinstance(node, (exp.And, exp.Or)):
        return _conditions(node.left) + _conditions(node.right)
    if isinstance(node, exp.Paren):
        return _conditions(node.this)
    return [node]


def _is_agg(node: exp.Expr) -> bool:
    node = node.unalias() if isinstance(node, exp.Alias) else node
    if isinstance(node, exp.Ordered):
        node = node.this
    return isinstance(node, (exp.Count, exp.Sum, exp.Avg, exp.Max, exp.Min))


def _approx_counts(select: exp.Select, n_setops: int) -> tuple[int, int, int]:
    where = select.args.get("where")
    having = select.args.get("having")
    group = select.args.get("group")
    order = select.args.get("order")
    joins = select.args.get("joins") or []
    where_expr = where.this if where else None
    having_expr = having.this if having else None
    conds = [where_expr, having_expr, *(j.args.get("on") for j in joins)]

    comp1 = int(where is not None) + int(group is not None) + int(order is not None)
    comp1 += int(select.args.get("limit") is not None) + len(joins)
    comp1 += sum(len(_own_nodes(c, exp.Or)) + len(_own_nodes(c, exp.Like)) for c in conds)
    comp2 = n_setops + sum(len(_own_nodes(c, (exp.Select, exp.SetOperation))) for c in conds)

    where_conds = _conditions(where_expr)
    having_conds = _conditions(having_expr)
    # Mirrors the official count_agg quirks: on WHERE/HAVING it sees the NOT flag of each
    # condition (not its aggregate), and every 'and'/'or' token of HAVING counts.
    agg = sum(1 for e in select.expressions if _is_agg(e))
    agg += sum(1 for c in where_conds + having_conds if isinstance(c, exp.Not))
    agg += max(len(having_conds) - 1, 0)
    if group is not None:
        agg += sum(1 for g in group.expressions if _is_agg(g))
    if order is not None:
        agg += sum(1 for o in order.expressions if _is_agg(o))
    others = int(agg > 1) + int(len(select.expressions) > 1) + int(len(where_conds) > 1)
    others += int(group is not None and len(group.expressions) > 1)
    return comp1, comp2, others


def approx_spider_hardness(sql: str) -> str:
    """Spider hardness estimated from SQL text with sqlglot (for files without a `sql` tree).

    Raises ValueError if sqlglot cannot parse the query.
    """
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError as err:
        raise ValueError(f"cannot parse SQL for hardness: {sql!r}: {err}") from err
    n_setops = 0
    while isinstance(tree, exp.SetOperation):
        n_setops = 1  # Spider nests chained set operations: only the top one counts here
        tree = tree.left
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    if not isinstance(tree, exp.Select):
        raise ValueError(f"not a SELECT query: {sql!r}")
    return hardness_from_counts(*_approx_counts(tree, n_setops))
