"""A rerun into a run_dir whose finished stages ran with other settings is refused, naming the changed keys."""

import dataclasses
from pathlib import Path

import pytest

from rewardsql_jax.conductor.context import setup
from rewardsql_jax.config import load_config
from rewardsql_jax.stages.stage_config import StageConfigChanged

ROOT = Path(__file__).resolve().parents[2]


def test_changed_settings_of_a_finished_stage_are_refused(tmp_path):
    cfg = dataclasses.replace(load_config(ROOT / "configs" / "conductor_smoke.py"), run_dir=str(tmp_path / "run"))
    run = setup(cfg, lambda *_: None)
    run.finish("search", {"questions": 0})
    setup(dataclasses.replace(cfg, checkpoint_every=7), lambda *_: None)  # how it runs, not what it makes
    changed = dataclasses.replace(cfg, action=dataclasses.replace(cfg.action, temperature=0.0), seed=3)
    with pytest.raises(StageConfigChanged, match=r"stage 'search'.*action\.temperature: 0\.7 -> 0\.0.*seed: 0 -> 3"):
        setup(changed, lambda *_: None)


def test_each_stage_is_refused_only_for_the_settings_it_depends_on(tmp_path):
    cfg = dataclasses.replace(load_config(ROOT / "configs" / "conductor_smoke.py"), run_dir=str(tmp_path / "run"))
    run = setup(cfg, lambda *_: None)
    run.finish("action_model", {})
    run.finish("search", {"questions": 0})
    assert (
        "policy.lr" not in run.metrics("search")["settings"]
        and "explore.num_simulations" in run.metrics("search")["settings"]
    )
    new_lr = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, lr=1e-4))
    setup(new_lr, lambda *_: None)  # the policy's stages have not run: the action model and MCTS are kept
    more_rl_steps = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, steps=cfg.rl.steps + 1))
    setup(more_rl_steps, lambda *_: None)  # GRPO's steps are not the search's
    reward = dataclasses.replace(cfg.rl.reward, call_cost=cfg.rl.reward.call_cost + 0.1)
    with pytest.raises(StageConfigChanged, match=r"stage 'search'.*rl\.reward\.call_cost"):
        setup(dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, reward=reward)), lambda *_: None)
    run.finish("policy_sft", {})
    with pytest.raises(StageConfigChanged, match=r"stage 'policy_sft'.*policy\.lr: 0\.003 -> 0\.0001"):
        setup(new_lr, lambda *_: None)
