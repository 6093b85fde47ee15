"""Bootstrap intervals of EX and of paired differences."""

import numpy as np
import pytest

from rewardsql_jax.stats import (
    evidence_table,
    ex_interval,
    mean_interval,
    paired_difference,
    paired_mean_difference,
)


def test_ex_interval_covers_the_mean_and_shrinks_with_more_questions():
    rng = np.random.default_rng(0)
    small, large = rng.random(50) < 0.3, rng.random(2000) < 0.3
    a, b = ex_interval(small), ex_interval(large)
    for r in (a, b):
        assert r["ci95"][0] <= r["ex"] <= r["ci95"][1]
    assert b["ci95"][1] - b["ci95"][0] < 0.4 * (a["ci95"][1] - a["ci95"][0])
    # binomial standard error: the 95% interval of 2000 questions at p=0.3 is about +-2.0 points
    assert b["ci95"][1] - b["ci95"][0] == pytest.approx(2 * 1.96 * 100 * np.sqrt(0.3 * 0.7 / 2000), rel=0.15)
    assert ex_interval([True] * 10) == {"ex": 100.0, "ci95": [100.0, 100.0]}


def test_paired_difference_cancels_what_two_methods_share():
    rng = np.random.default_rng(1)
    base = rng.random(400) < 0.5
    better = base.copy()
    better[np.flatnonzero(~base)[:20]] = True  # the same questions plus 20 more: +5 points
    d = paired_difference(better, base)
    assert d["delta"] == pytest.approx(5.0) and d["ci95"][0] > 0  # paired: clearly above zero
    unpaired = ex_interval(better)["ci95"][0] - ex_interval(base)["ci95"][1]
    assert unpaired < 0  # the two marginal intervals overlap although the paired one excludes 0
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(better[:10], base)


def test_evidence_table_shape():
    v = {"sft_greedy": [1, 0, 0, 1], "rl_greedy": [1, 1, 0, 1]}
    t = evidence_table(v, [("rl_greedy", "sft_greedy"), ("best_of_n", "sft_greedy")])
    assert set(t["methods"]) == {"sft_greedy", "rl_greedy"} and t["methods"]["rl_greedy"]["ex"] == 75.0
    assert t["comparisons"] == [
        {"method": "rl_greedy", "baseline": "sft_greedy", "delta": 25.0, "ci95": t["comparisons"][0]["ci95"]}
    ]


def test_mean_interval_and_paired_mean_difference_keep_the_unit():
    rng = np.random.default_rng(2)
    calls = rng.integers(1, 7, 300).astype(float)  # e.g. action calls per question
    r = mean_interval(calls)
    assert r["mean"] == pytest.approx(calls.mean()) and r["ci95"][0] < r["mean"] < r["ci95"][1] < 7
    assert mean_interval([3.0] * 20) == {"mean": 3.0, "ci95": [3.0, 3.0]}
    fewer = calls - (rng.random(300) < 0.5)  # about half a call fewer on the same questions
    d = paired_mean_difference(fewer, calls)
    assert d["delta"] == pytest.approx((fewer - calls).mean()) and d["ci95"][1] < 0
    assert ex_interval([1, 0, 1, 1])["ex"] == 100 * mean_interval([1, 0, 1, 1])["mean"]
    with pytest.raises(ValueError, match="same questions"):
        paired_mean_difference(calls[:5], calls)


def test_auc_interval_brackets_the_auc_and_narrows_with_more_items():
    from rewardsql_jax.stats import auc, auc_interval

    rng = np.random.default_rng(0)
    small_y, big_y = rng.integers(0, 2, 60), rng.integers(0, 2, 2000)
    small_s, big_s = small_y + rng.normal(0, 1, 60), big_y + rng.normal(0, 1, 2000)
    small, big = auc_interval(small_s, small_y), auc_interval(big_s, big_y)
    for r, (s, y) in ((small, (small_s, small_y)), (big, (big_s, big_y))):
        assert r["auc"] == auc(s, y) and r["ci95"][0] < r["auc"] < r["ci95"][1]
    assert big["ci95"][1] - big["ci95"][0] < small["ci95"][1] - small["ci95"][0]
    assert np.isnan(auc_interval([0.1, 0.9, 0.3], [1, 0, 0])["ci95"][0])  # one positive: no interval


def test_balanced_threshold_finds_the_cut_between_the_classes():
    from rewardsql_jax.stats import balanced_threshold

    # every positive scores 0.2-0.3, every negative below 0.1: a 0.5 cut calls all of them negative
    scores = [0.05, 0.08, 0.01, 0.2, 0.25, 0.3, 0.09]
    labels = [0, 0, 0, 1, 1, 1, 0]
    out = balanced_threshold(scores, labels)
    assert out == {"threshold": 0.2, "balanced_accuracy": 1.0}
    overlap = balanced_threshold([0.1, 0.4, 0.3, 0.6], [0, 0, 1, 1])  # best cut 0.3: TPR 1, TNR 0.5
    assert overlap["threshold"] == 0.3 and overlap["balanced_accuracy"] == 0.75
    assert balanced_threshold([0.2, 0.9], [1, 1])["threshold"] == 0.5
