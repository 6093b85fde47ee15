"""The evaluate stage's ``headroom`` block: SFT greedy EX vs pass@1 / pass@N of the SFT policy's own samples."""

import json
from types import SimpleNamespace

import pytest

from rewardsql_jax.stages import evaluate
from rewardsql_jax.stages.evaluate import headroom
from rewardsql_jax.stages.report import headroom_line

# 4 questions x N=2 samples. pass@1 (mean over samples) = mean(.5, .5, 0, 1) = 50, while "first sample only"
# would give 25; pass@2 (any correct) = 75, while "all correct" would give 25; greedy = 25.
GREEDY = [True, False, False, False]
SAMPLES = [[False, True], [False, True], [False, False], [True, True]]


def test_headroom_on_hand_made_verdicts():
    h = headroom(GREEDY, SAMPLES, temperature=0.7, seed=3)
    assert h["policy"] == "sft" and h["n"] == 2 and h["temperature"] == 0.7
    assert h["greedy"]["ex"] == pytest.approx(25.0)
    assert h["pass@1"]["ex"] == pytest.approx(50.0)
    assert h["pass@2"]["ex"] == pytest.approx(75.0)
    assert h["pass_at_n_minus_greedy"]["delta"] == pytest.approx(50.0)
    for key in ("greedy", "pass@1", "pass@2"):
        lo, hi = h[key]["ci95"]
        assert 0.0 <= lo <= h[key]["ex"] <= hi <= 100.0
    lo, hi = h["pass_at_n_minus_greedy"]["ci95"]
    # paired per-question differences are (0, 1, 0, 1): every resample lies in [0, 100]
    assert 0.0 <= lo <= 50.0 <= hi <= 100.0
    assert h["target"] == {"pass_at_n_minus_greedy_min": 10, "greedy_range": [20, 60], "met": True}


def test_headroom_target_needs_both_conditions():
    # gain 0 (greedy already right everywhere samples are): not met
    assert not headroom([True, True, False, True], SAMPLES, temperature=1.0)["target"]["met"]
    # gain >= 10 but greedy 0 < 20: not met
    low = headroom([False] * 4, SAMPLES, temperature=1.0)
    assert low["pass_at_n_minus_greedy"]["delta"] == pytest.approx(75.0) and not low["target"]["met"]


def test_headroom_bootstrap_uses_the_seed():
    assert headroom(GREEDY, SAMPLES, temperature=1.0, seed=0) == headroom(GREEDY, SAMPLES, temperature=1.0, seed=0)


def test_headroom_rejects_ragged_samples():
    with pytest.raises(ValueError, match="samples"):
        headroom(GREEDY, [[True, False]] * 3 + [[True]], temperature=1.0)
    with pytest.raises(ValueError, match="samples"):
        headroom(GREEDY, SAMPLES[:3], temperature=1.0)


def _ctx():
    return SimpleNamespace(config=SimpleNamespace(seed=0, inference=SimpleNamespace(temperature=0.7)))


def _preds(field, policy):
    return [
        {"policy_for_candidates": policy, field: [{"sql": "ok" if v else "bad", "signature": None} for v in s]}
        for s in SAMPLES
    ]


def test_sft_headroom_reads_sft_candidates_when_rl_is_final(monkeypatch):
    monkeypatch.setattr(evaluate, "_ex", lambda ctx, records, sqls: [s == "ok" for s in sqls])
    preds = _preds("sft_candidates", "rl")
    for p in preds:  # the RL policy's candidates must not be used for the SFT headroom
        p["candidates"] = [{"sql": "bad", "signature": None}] * 2
    h = evaluate._sft_headroom(_ctx(), [{}] * 4, preds, {"greedy_sft": GREEDY}, [[False, False]] * 4)
    assert h["pass@1"]["ex"] == pytest.approx(50.0) and h["pass@2"]["ex"] == pytest.approx(75.0)


def test_sft_headroom_reuses_candidates_when_sft_is_final():
    preds = _preds("candidates", "sft")
    h = evaluate._sft_headroom(_ctx(), [{}] * 4, preds, {"greedy_sft": GREEDY}, SAMPLES)
    assert h["pass@2"]["ex"] == pytest.approx(75.0) and h["temperature"] == 0.7
    # RL candidates without sft_candidates (an older run), or no SFT greedy (a predictions file): no block
    assert evaluate._sft_headroom(_ctx(), [{}] * 4, _preds("candidates", "rl"), {"greedy_sft": GREEDY}, SAMPLES) is None
    assert evaluate._sft_headroom(_ctx(), [{}] * 4, preds, {"predictions": GREEDY}, SAMPLES) is None


def test_headroom_summary_line():
    line = headroom_line(headroom(GREEDY, SAMPLES, temperature=0.7))
    assert line.startswith("headroom (SFT, T=0.7): greedy 25.0 [")
    assert "pass@1 50.0 [" in line and "pass@2 75.0 [" in line and "(+50.0 [" in line
    assert line.endswith("; target +10, greedy 20-60: met)")


def test_quadrants_use_the_given_threshold():
    # a correct prediction scored 0.3: +PR/+OR at the calibrated cut 0.2, -PR/+OR at the old fixed 0.5
    assert evaluate.quadrants([0.3, 0.1], [True, False], threshold=0.2) == {
        "+PR/+OR": 0.5,
        "+PR/-OR": 0.0,
        "-PR/+OR": 0.0,
        "-PR/-OR": 0.5,
    }
    assert evaluate.quadrants([0.3], [True])["-PR/+OR"] == 1.0


def test_quadrant_threshold_reads_prm_metrics(tmp_path):
    assert evaluate.quadrant_threshold(tmp_path) == {"value": 0.5, "source": "default 0.5"}
    (tmp_path / "prm").mkdir()
    metrics = tmp_path / "prm" / "metrics.json"
    metrics.write_text(json.dumps({"heldout": {"auc": 0.8, "threshold": 0.2, "balanced_accuracy": 0.75}}))
    assert evaluate.quadrant_threshold(tmp_path) == {"value": 0.2, "source": "prm heldout balanced accuracy"}
    # single-class held-out steps (balanced accuracy NaN) or an older prm stage without a threshold: 0.5
    metrics.write_text(json.dumps({"heldout": {"threshold": 0.5, "balanced_accuracy": float("nan")}}))
    assert evaluate.quadrant_threshold(tmp_path)["source"] == "default 0.5"
    metrics.write_text(json.dumps({"heldout": {"auc": 0.8}}))
    assert evaluate.quadrant_threshold(tmp_path) == {"value": 0.5, "source": "default 0.5"}
