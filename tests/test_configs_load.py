"""Every config file in configs/ loads and passes the whole-config checks (RL cross-field checks included)."""

from pathlib import Path

import pytest

from rewardsql_jax.config import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_loads(path):
    cfg = load_config(path)
    assert cfg.name and cfg.run_dir


def test_expo_default_is_the_default_with_clause_rewards():
    root = CONFIGS[0].parent
    default, expo = load_config(root / "default.py"), load_config(root / "expo_default.py")
    assert expo.rl.algorithm == "reinforce_pp" and default.rl.algorithm == "grpo"
    assert (expo.data, expo.model, expo.sft) == (default.data, default.model, default.sft)
    same_budget = ("steps", "prompts_per_step", "samples_per_prompt", "lr", "temperature", "max_new_tokens")
    assert all(getattr(expo.rl, k) == getattr(default.rl, k) for k in same_budget)
    assert "prm" not in expo.stages
