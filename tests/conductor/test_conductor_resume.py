"""A SQLConductor run killed in a stage resumes there: the finished stages are read back, not rerun."""

import dataclasses
import json
from pathlib import Path

import pytest

from rewardsql_jax.conductor import pipeline
from rewardsql_jax.conductor.run import run_conductor
from rewardsql_jax.config import load_config

ROOT = Path(__file__).resolve().parents[2]


class Killed(RuntimeError):
    pass


@pytest.mark.slow
def test_a_run_killed_in_rl_resumes_at_rl(tmp_path, monkeypatch):
    cfg = dataclasses.replace(load_config(ROOT / "configs" / "conductor_smoke.py"), run_dir=str(tmp_path / "run"))
    run = Path(cfg.run_dir)

    def killed(*args, **kwargs):
        raise Killed("killed in the RL stage")

    with monkeypatch.context() as m:
        m.setattr(pipeline, "train_grpo", killed)
        with pytest.raises(Killed):
            run_conductor(cfg, log=lambda *_: None)
    done = {"action_model", "search", "curation", "policy_sft"}
    assert {p.parent.name for p in run.glob("*/metrics.json")} == done
    weights = {p: p.stat().st_mtime_ns for p in (run / "action_model").glob("*.safetensors")}
    sft = json.loads((run / "policy_sft" / "metrics.json").read_text())

    lines = []
    results = run_conductor(cfg, log=lines.append)
    skipped = {line.split()[1] for line in lines if "(resume): skipping" in line}
    assert skipped == done
    assert {p: p.stat().st_mtime_ns for p in (run / "action_model").glob("*.safetensors")} == weights
    assert results["policy_sft_loss"] == sft["loss_curve"]
    assert (run / "policy_sft_rl" / "metrics.json").exists() and (run / "evaluation" / "metrics.json").exists()
    assert set(results["evaluations"]) == {"fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy"}
    assert len(results["rl_history"]) == cfg.rl.steps
