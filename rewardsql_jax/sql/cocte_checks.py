"""Checks that a Chain-of-CTEs has real steps (Reward-SQL section 3.1 Definitions 1-2, section 4.1 Figure 7).

A CoCTE step is a reasoning step the PRM scores (section 3.2) and GRPO gives a step advantage (section 5.1),
so a step should do something: ``step_issues`` reports steps that no later step (or the final query) reads,
steps that only rename their input (``SELECT * FROM prev``, or a projection that keeps every column of its
single source unchanged), and, given a database, steps whose prefix (``prefix_sql``: how the PRM's
``<result>`` annotation executes a step) does not execute.
"""

from __future__ import annotations

from sqlglot import exp

from .cocte import parse_single, prefix_sql, split_cocte
from .execute import execute


def needs_steps(sql: str) -> bool:
    """True when ``sql`` has a JOIN, a WHERE, a GROUP BY or a sub-query (a SELECT nested in a SELECT; the
    sides of a top-level set operation do not count): the queries a CoCTE should split into >= 2 steps."""
    tree = parse_single(sql)
    if any(tree.find_all(exp.Join, exp.Where, exp.Group)):
        return True
    return any(s is not tree and not isinstance(s.parent, exp.SetOperation) for s in tree.find_all(exp.Select))


def table_columns(db_path) -> dict[str, list[str]]:
    """``{table: [column, ...]}`` of a SQLite database (the ``schema`` argument of ``convert_to_cocte``)."""
    res = execute(db_path, "SELECT name FROM sqlite_master WHERE type = 'table'")
    out = {}
    for (name,) in res.rows if res.ok else ():
        cols = execute(db_path, f'SELECT * FROM "{name}" LIMIT 0')
        if cols.ok:
            out[name] = list(cols.columns)
    return out


def _tables(q: exp.Expr) -> set[str]:
    return {t.name.lower() for t in q.find_all(exp.Table)}


def _plain_projection(q: exp.Expr):
    """(source table name, projected names or None for ``*``) for a clause-free single-source SELECT."""
    if not isinstance(q, exp.Select) or q.args.get("from_") is None or not isinstance(q.args["from_"].this, exp.Table):
        return None
    if any(q.args.get(k) for k in ("joins", "where", "group", "having", "order", "limit", "offset", "distinct")):
        return None
    names = []
    for e in q.expressions:
        inner = e.unalias()
        if isinstance(inner, exp.Star):
            return q.args["from_"].this.name, None
        if not isinstance(inner, exp.Column) or inner.alias_or_name.lower() != e.alias_or_name.lower():
            return None  # a computed or renamed column is a real projection
        names.append(inner.name.lower())
    return q.args["from_"].this.name, names


def _source_columns(db_path, sql: str, steps, source: str, k: int) -> list[str] | None:
    """Column names of ``source`` (a base table or one of the first ``k`` steps) on ``db_path``."""
    names = [s.name.lower() for s in steps[:k]]
    if source.lower() in names:
        res = execute(db_path, prefix_sql(sql, names.index(source.lower()) + 1))
    else:
        res = execute(db_path, f'SELECT * FROM "{source}" LIMIT 0')
    return [c.lower() for c in res.columns] if res.ok else None


def step_issues(sql: str, db_path=None) -> list[str]:
    """Problems that make a CoCTE's steps not real steps; an empty list when there are none.

    Each entry is ``"<code>: <step name>"`` with code ``unreferenced`` (no later step nor the final query
    reads it), ``rename_only`` (it only copies its single source), ``prefix_error`` (its prefix query fails
    on ``db_path``; only checked when ``db_path`` is given).
    """
    cocte = split_cocte(sql)
    bodies = [parse_single(s.body) for s in cocte.steps]
    final = parse_single(cocte.final)
    issues = []
    for k, (step, body) in enumerate(zip(cocte.steps, bodies)):
        readers = [*bodies[k + 1 :], final]
        if not any(step.name.lower() in _tables(r) for r in readers):
            issues.append(f"unreferenced: {step.name}")
        plain = _plain_projection(body)
        if plain is not None:
            source, names = plain
            if names is None:
                issues.append(f"rename_only: {step.name}")
            elif db_path is not None:
                cols = _source_columns(db_path, sql, cocte.steps, source, k)
                if cols is not None and sorted(cols) == sorted(names):
                    issues.append(f"rename_only: {step.name}")
        if db_path is not None:
            res = execute(db_path, prefix_sql(sql, k + 1))
            if not res.ok and not (res.error or "").startswith("result has more than max_rows"):
                issues.append(f"prefix_error: {step.name}")  # a step too large to fetch still executes
    return issues
