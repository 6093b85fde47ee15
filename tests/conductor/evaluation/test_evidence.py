"""The evidence of a SQLConductor table: EX and calls per question with 95% bootstrap intervals per method, paired
differences of every policy against the fixed workflow and the SFT policy (``results.json`` methods /
comparisons, the Reward-SQL evaluate stage's shape) and the printed table."""

import numpy as np
import pytest

from rewardsql_jax.conductor.evaluation.evaluate import COMPARISONS, METHODS, evidence
from rewardsql_jax.conductor.evaluation.report import summary_lines
from rewardsql_jax.conductor.training.rollout import EpisodeRecord
from rewardsql_jax.stats import paired_difference


def _records(exact, calls, qids=None):
    qids = range(len(exact)) if qids is None else qids
    return [
        EpisodeRecord(q, "simple", ("generate_sql", "terminate"), int(c), 0, 0, "SELECT 1", True, bool(e), float(e))
        for q, e, c in zip(qids, exact, calls)
    ]


def _evaluations(n=200, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.random(n) < 0.3
    better = base | (rng.random(n) < 0.2)  # the same questions right, and some more
    return {
        "fixed_workflow": _records(base, [3] * n),
        "untrained_policy": _records(np.zeros(n, bool), [6] * n),
        "sft_policy": _records(base, rng.integers(1, 4, n)),
        "sft_rl_policy": _records(better, rng.integers(2, 4, n)),
    }


def test_methods_and_paired_comparisons_in_the_evaluate_stage_shape():
    records = _evaluations()
    ev = evidence(records, seed=0)
    assert list(ev["methods"]) == list(METHODS)
    for m, e in ev["methods"].items():
        ex = 100 * np.mean([r.exact for r in records[m]])
        calls = np.mean([r.num_calls for r in records[m]])
        assert set(e) == {"ex", "ci95", "calls", "calls_ci95"}
        assert e["ex"] == pytest.approx(ex) and e["ci95"][0] <= e["ex"] <= e["ci95"][1]
        assert e["calls"] == pytest.approx(calls) and e["calls_ci95"][0] <= e["calls"] <= e["calls_ci95"][1]
    assert ev["methods"]["fixed_workflow"]["calls_ci95"] == [3.0, 3.0]
    pairs = [(c["method"], c["baseline"]) for c in ev["comparisons"]]
    assert pairs == list(COMPARISONS) and len(pairs) == 5  # 3 policies vs the fixed workflow, 2 vs SFT
    assert {b for _, b in pairs} == {"fixed_workflow", "sft_policy"} and "fixed_workflow" not in {m for m, _ in pairs}
    by = {(c["method"], c["baseline"]): c for c in ev["comparisons"]}
    rl = by[("sft_rl_policy", "sft_policy")]
    expected = paired_difference([r.exact for r in records["sft_rl_policy"]], [r.exact for r in records["sft_policy"]])
    assert rl["delta"] == pytest.approx(expected["delta"]) and rl["ci95"] == pytest.approx(expected["ci95"])
    assert rl["delta"] > 0 and rl["ci95"][0] > 0  # a gain on the same questions shows as one
    assert set(rl) == {"method", "baseline", "delta", "ci95", "calls_delta", "calls_ci95"}
    assert by[("untrained_policy", "fixed_workflow")]["calls_delta"] == 3.0
    assert evidence(records, seed=0) == ev  # seeded


def test_methods_on_other_questions_are_refused():
    records = _evaluations(n=10)
    records["sft_policy"] = _records([True] * 10, [2] * 10, qids=range(1, 11))
    with pytest.raises(ValueError, match="same questions in the same order"):
        evidence(records)


def test_the_summary_prints_intervals_and_differences():
    records = _evaluations()
    ev = evidence(records)
    summaries = {
        m: {
            "questions": 200,
            "ex": ev["methods"][m]["ex"] / 100,
            "ex_by_difficulty": {"simple": 0.1},
            "executable": 1.0,
            "mean_action_calls": ev["methods"][m]["calls"],
            "mean_policy_tokens": 0.0,
            "mean_action_tokens": 0.0,
        }
        for m in METHODS
    }
    lines = summary_lines({"evaluations": summaries, **ev})
    text = "\n".join(lines)
    fixed = next(line for line in lines if line.startswith("fixed workflow ") and "[" in line)
    e = ev["methods"]["fixed_workflow"]
    assert (
        f"{e['ex']:.1f}" in fixed and f"[{e['ci95'][0]:.1f}, {e['ci95'][1]:.1f}]" in fixed and "[3.00, 3.00]" in fixed
    )
    c = next(c for c in ev["comparisons"] if (c["method"], c["baseline"]) == ("sft_rl_policy", "sft_policy"))
    row = next(line for line in lines if line.startswith("SFT+RL policy - SFT policy"))
    assert f"{c['delta']:+.1f}" in row and f"[{c['ci95'][0]:+.1f}, {c['ci95'][1]:+.1f}]" in row
    assert "paired differences" in text and text.count(" - fixed workflow") == 3


def test_several_episodes_a_question_are_averaged_per_question():
    """data.eval_repeats: a question's EX and calls are the mean of its episodes; intervals and pairs stay over
    questions (the paired difference equals the one of the per-question means)."""
    from rewardsql_jax.conductor.evaluation.evaluate import summarize

    qids = [0, 0, 0, 1, 1, 1]  # question-major, 3 episodes each
    a = _records([1, 0, 1, 0, 0, 1], [2, 2, 3, 2, 2, 2], qids)
    b = _records([1, 1, 1, 1, 0, 0], [3, 3, 3, 3, 3, 3], qids)
    ev = evidence({"sft_policy": a, "sft_rl_policy": b}, seed=0)
    assert ev["methods"]["sft_policy"]["ex"] == pytest.approx(50.0)
    assert ev["methods"]["sft_policy"]["calls"] == pytest.approx((7 / 3 + 2) / 2)
    (cmp,) = ev["comparisons"]
    assert cmp["delta"] == pytest.approx(100 / 6)  # (1 + 1/3) / 2 - (2/3 + 1/3) / 2
    assert cmp["ci95"] == pytest.approx(paired_difference([1, 1 / 3], [2 / 3, 1 / 3], seed=0)["ci95"])
    s = summarize(a)
    assert s["questions"] == 2 and s["episodes"] == 6 and s["ex"] == pytest.approx(0.5)
