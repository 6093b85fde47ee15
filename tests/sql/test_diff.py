"""EXPO-SQL diff types (Table 1, Appendix A.1) and Table 12 candidates."""

import pytest

from rewardsql_jax.sql import ExecResult, diff_types
from rewardsql_jax.sql.diff import DIFF_TYPES, TABLE12, candidate_clauses


def res(rows, cols=None):
    rows = tuple(tuple(r) for r in rows)
    if cols is None:
        width = len(rows[0]) if rows else 1
        cols = tuple(f"c{i}" for i in range(width))
    return ExecResult(ok=True, columns=tuple(cols), rows=rows)


GOLD = res([("ann", 30), ("bob", 40), ("cid", 50)], ("name", "age"))


def test_names_are_exactly_table1():
    assert DIFF_TYPES == (
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
    assert set(TABLE12) == set(DIFF_TYPES)


def test_equal_results_have_no_diff():
    assert diff_types(GOLD, GOLD) == set()
    assert diff_types(GOLD, GOLD, ordered=True) == set()


def test_col_count():
    pred = res([("ann",), ("bob",), ("cid",)], ("name",))
    assert diff_types(pred, GOLD) == {"col_count"}


def test_col_name():
    pred = res(GOLD.rows, ("title", "age"))
    assert diff_types(pred, GOLD) == {"col_name"}


def test_col_name_compares_attribute_names_only():
    assert diff_types(res([(3,)], ("Name",)), res([(3,)], ('"name"',))) == set()
    # Expression labels (computed columns) are not attribute names: a wrong aggregate is value-level.
    assert diff_types(res([(3,)], ("max(age)",)), res([(5,)], ("min(age)",))) == {"row_partial"}
    assert diff_types(res([(3,)], ("total",)), res([(5,)], ("cnt",))) == {"col_name", "row_disjoint"}


def test_row_order_only_when_ordered():
    pred = res(list(reversed(GOLD.rows)), GOLD.columns)
    assert diff_types(pred, GOLD, ordered=True) == {"row_order"}
    assert diff_types(pred, GOLD, ordered=False) == set()


def test_row_dedup():
    pred = res(list(GOLD.rows) + [GOLD.rows[0]], GOLD.columns)
    assert diff_types(pred, GOLD) == {"row_dedup"}
    assert diff_types(pred, GOLD, ordered=True) == {"row_dedup"}


def test_row_subset():
    pred = res(GOLD.rows[:2], GOLD.columns)
    assert diff_types(pred, GOLD) == {"row_subset"}


def test_row_superset():
    pred = res(list(GOLD.rows) + [("dan", 60)], GOLD.columns)
    assert diff_types(pred, GOLD) == {"row_superset"}


def test_partial_overlap_is_subset_and_superset():
    pred = res([("ann", 30), ("zed", 99)], GOLD.columns)
    assert diff_types(pred, GOLD) == {"row_subset", "row_superset"}


def test_row_emptied():
    assert diff_types(res([], GOLD.columns), GOLD) == {"row_emptied"}


def test_row_created():
    assert diff_types(GOLD, res([], GOLD.columns)) == {"row_created"}


def test_emptiness_is_reported_with_column_differences():
    assert diff_types(res([], ("x",)), GOLD) == {"col_count", "row_emptied"}


def test_row_disjoint():
    pred = res([("xavier", 1), ("yara", 2), ("zoe", 3)], GOLD.columns)
    assert diff_types(pred, GOLD) == {"row_disjoint"}


def test_row_partial_aggregate_value():
    # 1x1 results of a calculated column (a wrong aggregate): value-level, not disjoint rows.
    assert diff_types(res([(20,)], ("max(age)",)), res([(50,)], ("min(age)",))) == {"row_partial"}
    # The same values under an attribute label are different rows (e.g. a wrong superlative's name).
    assert diff_types(res([("dan",)], ("name",)), res([("eve",)], ("name",))) == {"row_disjoint"}


def test_row_partial_multi_column_rows_keep_their_keys():
    gold = res([("a", 3), ("b", 5)], ("k", "count(*)"))
    assert diff_types(res([("a", 3), ("b", 4)], ("k", "count(*)")), gold) == {"row_partial"}
    assert diff_types(res([("a", 1), ("b", 1)], ("k", "COUNT(*)")), gold) == {"row_partial"}
    # A key that changed is a different row, not a changed value.
    assert diff_types(res([("a", 3), ("c", 5)], ("k", "count(*)")), gold) == {"row_subset", "row_superset"}
    # Attribute columns only: a shared value does not make rows align.
    plain = res([("ann", 30), ("bob", 40)], ("name", "age"))
    assert diff_types(res([("ann", 30), ("cid", 40)], ("name", "age")), plain) == {"row_subset", "row_superset"}


def test_different_row_counts_do_not_align():
    gold = res([("a", 3), ("b", 5)], ("k", "sum(n)"))
    pred = res([("a", 4)], ("k", "sum(n)"))
    assert diff_types(pred, gold) == {"row_disjoint"}


def test_calculated_column_lists_of_equal_length_align():
    gold = res([(1,), (2,), (3,)], ("count(*)",))
    assert diff_types(res([(1,), (2,), (4,)], ("count(*)",)), gold) == {"row_partial"}


def test_single_column_multi_row_changes_are_row_level():
    gold = res([(1,), (2,), (3,)])
    pred = res([(1,), (2,), (4,)])
    assert diff_types(pred, gold) == {"row_subset", "row_superset"}


def test_failed_result_is_rejected():
    bad = ExecResult(ok=False, error="no such column: x")
    with pytest.raises(ValueError, match="pred failed"):
        diff_types(bad, GOLD)
    with pytest.raises(ValueError, match="gold failed"):
        diff_types(GOLD, bad)


def test_candidate_clauses_table12():
    assert candidate_clauses({"row_order"}) == {"ORDER BY"}
    assert candidate_clauses({"row_subset"}) == {"WHERE", "JOIN", "HAVING", "LIMIT"}
    assert candidate_clauses({"row_superset"}) == {"JOIN", "WHERE"}
    assert candidate_clauses({"row_partial", "row_dedup"}) == {"SELECT", "GROUP BY"}
    assert candidate_clauses(set()) == set()
    with pytest.raises(ValueError, match="unknown diff type"):
        candidate_clauses({"row_missing"})
