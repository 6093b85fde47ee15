"""End-to-end SQLConductor run at CI size (configs/conductor_smoke.py): every stage runs and reports."""

import dataclasses
import json
from pathlib import Path

import pytest

from rewardsql_jax.conductor.run import run_conductor, summary_lines
from rewardsql_jax.config import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_conductor_smoke_pipeline(tmp_path):
    cfg = dataclasses.replace(load_config(ROOT / "configs" / "conductor_smoke.py"), run_dir=str(tmp_path / "run"))
    assert cfg.pipeline == "conductor"
    results = run_conductor(cfg, log=lambda *_: None)
    ev = results["evaluations"]
    assert set(ev) == {"fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy"}
    n = cfg.data.max_eval_questions
    for s in ev.values():
        assert s["questions"] == n and 0.0 <= s["ex"] <= s["executable"] <= 1.0
        assert 1 <= s["mean_action_calls"] <= max(cfg.policy.max_steps, len(cfg.fixed_workflow))
        assert sum(sum(h.values()) for h in s["length_hist"].values()) == n
    assert ev["fixed_workflow"]["mean_action_calls"] == 3 and ev["fixed_workflow"]["mean_action_tokens"] > 0
    assert ev["untrained_policy"]["mean_policy_tokens"] > 0
    assert results["exploration"]["questions"] == cfg.data.max_explore_questions
    curation = results["curation"]  # the curated SFT set with every trajectory's stability weight
    assert curation["trajectories"] == results["exploration"]["curated_workflows"] == len(curation["stability_weights"])
    run = Path(cfg.run_dir)
    assert (run / "workflow_lengths.png").stat().st_size > 1000
    saved = json.loads((run / "results.json").read_text())
    assert saved["evaluations"]["sft_policy"]["questions"] == n
    assert set(saved["methods"]) == set(ev)
    for m, e in saved["methods"].items():  # EX in points with its interval, calls per question with its interval
        assert e["ex"] == pytest.approx(100 * ev[m]["ex"]) and e["ci95"][0] <= e["ex"] <= e["ci95"][1]
        assert e["calls"] == pytest.approx(ev[m]["mean_action_calls"])
    assert {(c["method"], c["baseline"]) for c in saved["comparisons"]} == {
        (m, b)
        for b in ("fixed_workflow", "sft_policy")
        for m in ("untrained_policy", "sft_policy", "sft_rl_policy")
        if m != b
    }
    assert (run / "action_model" / "config.json").exists() and (run / "policy_sft_rl" / "config.json").exists()
    assert list((run / "tensorboard" / "action_sft").glob("events.out.tfevents.*"))
    for m, s in ev.items():  # the figure's numbers: calls / steps per difficulty and overall
        table = saved["workflow_lengths"][m]
        assert table["all"]["questions"] == n and table["all"]["mean_calls"] == pytest.approx(s["mean_action_calls"])
        assert sum(row["questions"] for d, row in table.items() if d != "all") == n
        for d, row in table.items():
            assert 0 <= row["mean_steps"] <= row["mean_calls"]
            if d != "all":
                assert row["questions"] == sum(s["length_hist"][d].values())
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 4 * n
    lines = summary_lines(results)
    assert any(line.startswith("fixed workflow") for line in lines) and any("SFT+RL" in line for line in lines)
    assert any(line.startswith("SFT+RL policy - fixed workflow") for line in lines)
