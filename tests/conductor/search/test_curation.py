import math

import pytest

from rewardsql_jax.conductor.search.curation import (
    curate_question,
    curation_summary,
    power_weights,
    stability_score,
    top_k_stable,
)


def test_stability_is_success_rate():
    assert stability_score([True, False, True, True]) == 0.75
    assert stability_score([]) == 0.0


def test_power_weights_alpha2_sum_to_one_and_sharpen():
    w = power_weights([1.0, 0.5, 0.5], alpha=2)
    assert math.isclose(sum(w), 1.0)
    assert w == pytest.approx([1 / 1.5, 0.25 / 1.5, 0.25 / 1.5])
    assert power_weights([0.3, 0.3]) == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="every stability score is 0"):
        power_weights([0.0, 0.0])


def test_top_k_prefers_stable_then_short_and_drops_zero():
    scores = {("g", "t"): 2 / 3, ("l", "g", "t"): 1.0, ("g", "r", "t"): 2 / 3, ("s", "t"): 1 / 3, ("x", "t"): 0.0}
    assert [w for w, _ in top_k_stable(scores, 3)] == [("l", "g", "t"), ("g", "t"), ("g", "r", "t")]


def test_weights_sum_to_one_per_question():
    per_question = {
        0: {("g", "t"): 1.0, ("g", "r", "t"): 1 / 3, ("s", "t"): 2 / 3, ("l", "g", "t"): 1 / 3},
        1: {("g", "t"): 0.5},
        2: {("g", "t"): 0.0},
    }
    for qid, scores in per_question.items():
        curated = curate_question(qid, scores, {w: f"traj{w}" for w in scores}, k=3, alpha=2)
        if qid == 2:
            assert curated == []
            continue
        assert len(curated) == min(3, sum(p > 0 for p in scores.values()))
        assert math.isclose(sum(c.weight for c in curated), 1.0)
        assert all(c.question_id == qid and c.trajectory == f"traj{c.workflow}" for c in curated)


def test_curation_summary_reports_every_weight_and_each_pattern():
    a, b, c = (
        ("generate_sql", "terminate"),
        ("retrieve_values", "generate_sql", "terminate"),
        ("build_sql_steps", "terminate"),
    )
    curated = curate_question(1, {a: 1.0, b: 0.5}, {a: "s1", b: "s2"}) + curate_question(
        2, {a: 0.5, c: 0.5}, {a: "s", c: "s"}
    )
    out = curation_summary(curated)
    assert out["trajectories"] == 4 and out["questions"] == 2
    assert [w["weight"] for w in out["stability_weights"]] == pytest.approx([0.8, 0.2, 0.5, 0.5])
    pattern = out["by_workflow"]["generate_sql -> terminate"]
    assert pattern == {"trajectories": 2, "mean_stability": 0.75, "weight": pytest.approx(1.3)}
    assert list(out["by_workflow"])[0] == "generate_sql -> terminate"  # heaviest first
