"""End-to-end: `python launch/run.py --config configs/smoke.py` runs every stage and leaves sane artefacts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_pipeline_runs_every_stage_and_resumes(tmp_path):
    run_dir = tmp_path / "smoke"
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "EX (bird rule)" in proc.stdout
    for stage in ("cold_start", "sft", "prm_labels", "prm", "rl", "inference", "evaluate"):
        assert (run_dir / stage / "metrics.json").exists(), stage
    cold = json.loads((run_dir / "cold_start" / "metrics.json").read_text())
    assert cold["train_questions"] > 0 and cold["cocte_verified"] <= cold["train_questions"]
    sft = json.loads((run_dir / "sft" / "metrics.json").read_text())
    assert sft["loss_curve"][-1][1] < sft["loss_curve"][0][1]  # SFT lowers the loss
    assert all(list((run_dir / "tensorboard" / s).glob("events.out.tfevents.*")) for s in ("sft", "prm", "rl"))
    for d in ("sft/policy", "prm/model", "rl/policy"):
        assert (run_dir / d / "config.json").exists() and (run_dir / d / "model.safetensors").exists(), d
    ev = json.loads((run_dir / "evaluate" / "metrics.json").read_text())
    assert set(ev["ex"]) >= {"greedy_sft", "greedy_rl", "best_of_n", "self_consistency"}
    assert all(0.0 <= v <= 1.0 for v in ev["ex"].values())
    assert (run_dir / "evaluate" / "pass_at_n.png").stat().st_size > 1000
    # every EX with its 95% interval (points) and the paired differences, as the default run prints them
    assert set(ev["methods"]) >= {"sft_greedy", "rl_greedy", "best_of_n", "self_consistency"}
    for m, r in ev["methods"].items():
        assert r["ex"] == pytest.approx(
            100 * ev["ex"][{"sft_greedy": "greedy_sft", "rl_greedy": "greedy_rl"}.get(m, m)]
        )
        assert r["ci95"][0] <= r["ex"] <= r["ci95"][1]
    comps = {(c["method"], c["baseline"]): c for c in ev["comparisons"]}
    assert ("rl_greedy", "sft_greedy") in comps and ("best_of_n", "self_consistency") in comps
    c = comps[("rl_greedy", "sft_greedy")]
    assert c["delta"] == pytest.approx(ev["methods"]["rl_greedy"]["ex"] - ev["methods"]["sft_greedy"]["ex"])
    assert "95% bootstrap intervals" in proc.stdout and "paired differences" in proc.stdout
    rl = json.loads((run_dir / "rl" / "metrics.json").read_text())
    assert 0.0 <= rl["or_rate_first"] <= 1.0 and 0.0 <= rl["or_rate_last"] <= 1.0
    assert (run_dir / "rl" / "learning_curve.png").stat().st_size > 1000
    preds = json.loads((run_dir / "evaluate" / "predict_dev.json").read_text())
    assert len(preds) == ev["questions"]
    # the SFT policy's headroom: greedy vs pass@1 / pass@N of its own samples (the rl stage ran, so they are
    # sft_candidates, sampled apart from the RL policy's candidates)
    n = 2  # configs/smoke.py: inference.best_of_n
    h = ev["headroom"]
    assert set(h) == {"policy", "n", "temperature", "greedy", "pass@1", f"pass@{n}", "pass_at_n_minus_greedy", "target"}
    assert h["policy"] == "sft" and h["n"] == n
    assert h["greedy"]["ex"] == pytest.approx(ev["methods"]["sft_greedy"]["ex"])
    for key in ("greedy", "pass@1", f"pass@{n}"):
        assert h[key]["ci95"][0] <= h[key]["ex"] <= h[key]["ci95"][1]
    assert h["pass@1"]["ex"] <= h[f"pass@{n}"]["ex"] + 1e-9
    assert h["pass_at_n_minus_greedy"]["delta"] == pytest.approx(h[f"pass@{n}"]["ex"] - h["greedy"]["ex"])
    assert set(h["target"]) == {"pass_at_n_minus_greedy_min", "greedy_range", "met"}
    assert "headroom (SFT, T=" in proc.stdout
    rows = json.loads((run_dir / "inference" / "predictions.json").read_text())
    assert all(r["policy_for_candidates"] == "rl" for r in rows)
    assert all(len(r["sft_candidates"]) == n and set(r["sft_candidates"][0]) == {"sql", "signature"} for r in rows)
    # Rerunning the same command resumes: every stage is skipped.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("already done") == 7
