"""Difference types between two execution results (EXPO-SQL section 3.2.2, Table 1, Appendix A.1, Table 12).

``diff_types(pred, gold)`` classifies how ``pred`` differs from ``gold`` into the 10 types of Table 1,
named exactly as there. Table 13 derives them from four axes of a SQL result (a bag of tuples over a schema,
optionally ordered): schema, bag content, ordering, value. The precise rules used here:

* Schema: ``col_count`` when the numbers of columns differ; otherwise ``col_name`` when, at some position
  where both columns are named attributes (plain identifiers: a column or an alias), the names differ (case and
  identifier quotes ignored). SQLite labels a computed column with its expression text (``max(age)``), which
  is not an attribute name: a wrong aggregate is a value-level difference (``row_partial``), not ``col_name``.
* Emptiness (checked whatever the schema): ``row_emptied`` (pred empty, gold not), ``row_created``
  (pred not empty, gold empty).
* Content, only when the column counts match and both results are non-empty (rows of different widths are
  never equal, so comparing them says nothing beyond ``col_count``). ``P``/``G`` are the sets of distinct rows:
  - ``P == G``: ``row_dedup`` when the multiplicities differ (bag vs set); otherwise ``row_order`` when
    ``ordered`` and the row sequences differ.
  - ``P != G`` and the results *align*: ``row_partial`` (Table 12: "structure aligns, but calculated values
    (aggregates/math) are wrong"). A column is *calculated* when its label (in pred or gold) is expression text
    rather than an attribute name; the results align when some column is calculated, both have the same
    number of rows, and every extra row equals some missing row on all the non-calculated columns (only the
    calculated values changed). Aligned rows are changed rows, not missing or extra ones, so ``row_partial``
    then replaces ``row_subset``/``row_superset``/``row_disjoint``. Results of attribute columns only never
    align: different values there are different rows. (An aggregate hidden behind an alias in both queries
    reads as an attribute, so its wrong value shows as a row-level difference.)
  - otherwise ``row_disjoint`` when ``P`` and ``G`` share no row; else ``row_subset`` when some gold rows are
    missing and ``row_superset`` when extra rows are present (both when the overlap is partial).

``TABLE12`` maps every type to the clauses Table 12 lists as its potential origin.
"""

from __future__ import annotations

import re
from collections import Counter

from .execute import ExecResult

DIFF_TYPES = (
    "col_count",
    "col_name",
    "row_order",
    "row_dedup",
    "row_subset",
    "row_superset",
    "row_emptied",
    "row_created",
    "row_disjoint",
    "row_partial",
)

# Table 12, "Potential Erroneous Clauses" (SELECT (DISTINCT) and SELECT (Aggregates) are the SELECT clause).
TABLE12: dict[str, tuple[str, ...]] = {
    "col_count": ("SELECT", "FROM", "JOIN"),
    "col_name": ("SELECT", "FROM", "JOIN"),
    "row_order": ("ORDER BY",),
    "row_dedup": ("SELECT", "GROUP BY"),
    "row_subset": ("WHERE", "JOIN", "HAVING", "LIMIT"),
    "row_superset": ("JOIN", "WHERE"),
    "row_emptied": ("WHERE", "JOIN", "HAVING"),
    "row_created": ("FROM", "JOIN"),
    "row_disjoint": ("FROM", "JOIN", "WHERE"),
    "row_partial": ("SELECT",),
}


def candidate_clauses(diffs) -> set[str]:
    """Clause kinds that Table 12 (EXPO-SQL Appendix A) lists as potential origins of any of ``diffs``."""
    out: set[str] = set()
    for d in diffs:
        if d not in TABLE12:
            raise ValueError(f"unknown diff type {d!r}; expected one of {DIFF_TYPES}")
        out.update(TABLE12[d])
    return out


def _attribute(name) -> str | None:
    """The normalised attribute name of a result label, or None for a computed column's expression text."""
    name = str(name).strip().strip("\"'`[]").lower()
    return name if re.fullmatch(r"[\w$]+", name) else None


def _aligned(pred: ExecResult, gold: ExecResult, extra: set[tuple], missing: set[tuple]) -> bool:
    calculated = [_attribute(a) is None or _attribute(b) is None for a, b in zip(pred.columns, gold.columns)]
    if not any(calculated) or len(pred.rows) != len(gold.rows) or not extra or not missing:
        return False
    keys = [k for k, c in enumerate(calculated) if not c]
    return all(any(all(p[k] == g[k] for k in keys) for g in missing) for p in extra)


def diff_types(pred: ExecResult, gold: ExecResult, *, ordered: bool = False) -> set[str]:
    """Set of EXPO-SQL difference types (Table 1, Appendix A.1) of ``pred`` with respect to ``gold``.

    Both arguments must be successful ``ExecResult``s. ``ordered`` compares row sequences (``row_order``), as
    when the gold query has ORDER BY. Equal results give the empty set. Rules: see the module docstring.
    """
    for name, res in (("pred", pred), ("gold", gold)):
        if not getattr(res, "ok", False):
            raise ValueError(f"diff_types needs successful results; {name} failed: {getattr(res, 'error', res)!r}")
    out: set[str] = set()
    if len(pred.columns) != len(gold.columns):
        out.add("col_count")
    elif any(
        a is not None and b is not None and a != b
        for a, b in zip(map(_attribute, pred.columns), map(_attribute, gold.columns))
    ):
        out.add("col_name")
    p_rows, g_rows = list(pred.rows), list(gold.rows)
    if not p_rows and g_rows:
        out.add("row_emptied")
    elif p_rows and not g_rows:
        out.add("row_created")
    if "col_count" in out or not p_rows or not g_rows:
        return out
    p_bag, g_bag = Counter(map(tuple, p_rows)), Counter(map(tuple, g_rows))
    p_set, g_set = set(p_bag), set(g_bag)
    if p_set == g_set:
        if p_bag != g_bag:
            out.add("row_dedup")
        elif ordered and [tuple(r) for r in p_rows] != [tuple(r) for r in g_rows]:
            out.add("row_order")
        return out
    extra, missing = p_set - g_set, g_set - p_set
    if _aligned(pred, gold, extra, missing):
        out.add("row_partial")
        return out
    if not (p_set & g_set):
        out.add("row_disjoint")
        return out
    if missing:
        out.add("row_subset")
    if extra:
        out.add("row_superset")
    return out
