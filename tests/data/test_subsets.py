"""data.subsets: the stratified evaluation subset and the questions held out per database for RL."""

import collections

import pytest

from rewardsql_jax.data.examples import Example
from rewardsql_jax.data.subsets import held_out_per_database, proportional_counts, stratified_subset


def test_proportional_counts_round_by_largest_remainder():
    # quotas 10 * (5, 3, 2) / 10 are whole
    assert proportional_counts({"a": 5, "b": 3, "c": 2}, 10) == {"a": 5, "b": 3, "c": 2}
    # quotas 4 * (5, 3, 2) / 10 = 2.0, 1.2, 0.8: floors 2, 1, 0, the one left over to c (remainder 0.8)
    assert proportional_counts({"a": 5, "b": 3, "c": 2}, 4) == {"a": 2, "b": 1, "c": 1}
    # 400 of Spider dev's hardness counts (972 questions): the sum is exact
    dev = {"easy": 232, "extra": 164, "hard": 160, "medium": 416}
    counts = proportional_counts(dev, 400)
    assert sum(counts.values()) == 400
    assert all(abs(counts[k] - 400 * v / 972) < 1 for k, v in dev.items())
    assert proportional_counts({"a": 2, "b": 1}, 5) == {"a": 2, "b": 1}  # more than there are: everything
    with pytest.raises(ValueError, match="n must be >= 0"):
        proportional_counts({"a": 1}, -1)


def test_stratified_subset_keeps_order_and_shares_and_depends_only_on_its_seed():
    labels = ["easy"] * 40 + ["hard"] * 30 + ["medium"] * 20 + ["extra"] * 10
    labels = [labels[(7 * i) % 100] for i in range(100)]  # interleaved
    pick = stratified_subset(labels, 30, seed=0)
    assert pick == sorted(pick) and len(set(pick)) == 30
    assert collections.Counter(labels[i] for i in pick) == {"easy": 12, "hard": 9, "medium": 6, "extra": 3}
    assert stratified_subset(labels, 30, seed=0) == pick
    assert stratified_subset(labels, 30, seed=1) != pick
    assert stratified_subset(labels, 0, seed=3) == list(range(100))
    assert stratified_subset(labels, 500, seed=3) == list(range(100))


def _ex(i, db, sql):
    return Example(i, db, f"question {i}", "", sql, "easy", f"/db/{db}.sqlite")


def test_held_out_per_database_caps_splits_and_keeps_gold_queries_on_one_side():
    examples = []
    for db, n in (("a", 20), ("b", 6), ("c", 1)):
        for j in range(n):
            examples.append(_ex(len(examples), db, f"SELECT {j // 2} FROM t"))  # every query asked twice
    kept, held = held_out_per_database(examples, 4, seed=0)
    assert sorted(e.question_id for e in kept + held) == list(range(len(examples)))
    assert [e.question_id for e in kept] == sorted(e.question_id for e in kept)
    per_db = collections.Counter(e.db_id for e in held)
    assert per_db == {"a": 4, "b": 2}  # b: at most half of its 6; c: its single question stays with SFT
    assert {e.db_id for e in kept} == {"a", "b", "c"}
    queries = lambda xs: {(e.db_id, e.gold_sql) for e in xs}  # noqa: E731
    assert not queries(kept) & queries(held)
    assert held_out_per_database(examples, 4, seed=0) == (kept, held)
    assert held_out_per_database(examples, 4, seed=1)[1] != held
    assert held_out_per_database(examples, 0, seed=0) == (examples, [])
