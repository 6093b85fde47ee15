"""The RL learning test: every RL algorithm, run through the real RL stage, must make the policy better at a
task it can only learn from reward, and must not when its advantages' sign is flipped.

The task (``learning_task.py``): the briefly SFT-ed policy writes executable Chain-of-CTEs whose final
aggregate is the asked one about a quarter of the time (``SFT_OR`` below is measured, not assumed). Every
algorithm runs ``launch``'s stage path (``run_pipeline(stages=("rl",))``) with execution rewards from the SQL
worker pool, PRM step scores from a PRM trained by the real ``prm_labels`` and ``prm`` stages, EXPO-SQL clause
rewards and the stage's token alignment and batching; the measure is the OR rate of 16 samples per question at
the RL temperature, before (SFT policy) and after (``rl/policy``). This is the safety net of the RL path: a
change that makes it fail is wrong (sign, log-prob alignment, advantage placement, temperature, rewards).
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pytest

from rewardsql_jax.rl import Update
from rewardsql_jax.rl import batches as rl_batches
from rewardsql_jax.rl.algorithms import dpo, rs
from rewardsql_jax.stages.run_config import (
    ModelConfigSection,
    PRMConfig,
    PRMLabelConfig,
    RLConfig,
    RunConfig,
    SFTConfig,
)
from rewardsql_jax.stages.runner import run_pipeline

from learning_task import sampled_or_rate, write_cold_start

pytestmark = pytest.mark.slow

ONLINE = ("grpo", "grpo_outcome", "grpo_deepseekmath", "reinforce_pp")
OFFLINE = ("dpo", "rs")
MAX_NEW = 40
RL = {  # per algorithm: its budget on this task (seeded; the same for the sign-flipped control)
    "grpo": dict(steps=16, lr=1e-3),
    "grpo_outcome": dict(steps=16, lr=1e-3),
    "grpo_deepseekmath": dict(steps=12, lr=5e-4, kl_beta=0.05),
    "reinforce_pp": dict(steps=16, lr=1e-3, samples_per_prompt=4, kl_beta=0.01),
    "dpo": dict(steps=8, lr=5e-4, algorithm_options={"beta": 0.1}),
    "rs": dict(steps=16, lr=1e-3),
}
# The OR rate each must reach (and at least double the SFT policy's). DPO gets one (best, worst) pair per
# question, 16 pairs here, that differ only in the aggregate: the case where DPO, trained long enough, lowers the
# likelihood of both sides (likelihood displacement; the paper trains DPO 1 epoch at a reduced lr for this
# reason). Measured from 0.20: 0.49-0.59 over five budgets at seed 0 and collapse to ~0 with more steps
# (``reward_chosen`` in the log turns negative); 0.43 at seed 1. So its bar is 0.4, twice its start.
# 2026-12-02 (AMD EPYC, jax 0.10.2): 12 steps sat on the edge of that collapse (seed 0: 0.38, 16 steps 0.00; the
# same at the commit before this session's changes), so the budget is 8 steps, inside the plateau at every seed
# tried: steps 6 / 8 / 10 give 0.49 / 0.55 / 0.57 at seed 0, 0.54 / 0.54 / 0.23 at seed 1; 8 steps 0.57 at seed 2.
MIN_AFTER = {"dpo": 0.4}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Cold start of the task, a 150-step SFT, PRM labels by MCTS over the SFT policy's rollouts and a trained
    PRM: the shared start of every RL run (each copies it). Also the SFT policy's OR rate."""
    root = tmp_path_factory.mktemp("learning") / "base"
    cfg = RunConfig(
        name="learning",
        run_dir=str(root),
        seed=int(os.environ.get("REWARDSQL_LEARNING_SEED", "0")),
        workers=1,
        memory_check="off",
        stages=("cold_start", "sft", "prm_labels", "prm", "rl"),
        model=ModelConfigSection(
            vocab_size=400,
            hidden_size=64,
            intermediate_size=128,
            num_layers=1,
            num_heads=2,
            num_kv_heads=1,
            max_len=512,
        ),
        sft=SFTConfig(steps=150, batch_size=16, lr=1e-2, warmup_steps=2),
        prm_labels=PRMLabelConfig(
            num_questions=16, rollouts_per_question=4, completions_per_step=8, search_budget=4, max_new_tokens=MAX_NEW
        ),
        prm=PRMConfig(steps=200, batch_size=16, lr=3e-3, heldout_fraction=0.25),
        rl=RLConfig(prompts_per_step=4, samples_per_prompt=8, max_new_tokens=MAX_NEW, checkpoint_every=100),
    )
    write_cold_start(root, cfg.model.vocab_size)
    results = run_pipeline(dataclasses.replace(cfg, stages=("sft", "prm_labels", "prm")), log=lambda *_: None)
    return cfg, results["prm"], sampled_or_rate(root, "sft/policy", max_new_tokens=MAX_NEW)


def _flip_online(monkeypatch):
    """The control: every online algorithm's advantages (or REINFORCE++'s token rewards) with the sign flipped,
    at the one place they become a train batch."""
    build = rl_batches.train_batch

    def flipped(ro, upd, **kw):
        if upd.advantages is not None:
            return build(ro, Update(upd.rewards, advantages=-np.asarray(upd.advantages)), **kw)
        return build(ro, Update(upd.rewards, token_values=[-np.asarray(v) for v in upd.token_values]), **kw)

    monkeypatch.setattr(rl_batches, "train_batch", flipped)


def _flip_offline(monkeypatch):
    """The control of the offline algorithms: DPO prefers the worse candidate of each pair, RS keeps as many
    candidates as it would, ranked by -R instead of R."""
    pairs, kept = dpo.dpo_pairs, rs.rs_kept
    monkeypatch.setattr(dpo, "dpo_pairs", lambda cands: [(b, a) for a, b in pairs(cands)])
    monkeypatch.setattr(
        rs, "rs_kept", lambda cands, threshold: sorted(cands, key=lambda c: c["reward"])[: len(kept(cands, threshold))]
    )


def _run_rl(base, tmp_path, algorithm, name):
    cfg, _, _ = base
    run = tmp_path / name
    shutil.copytree(cfg.run_dir, run)
    rl = dataclasses.replace(cfg.rl, algorithm=algorithm, **RL[algorithm])
    metrics = run_pipeline(dataclasses.replace(cfg, run_dir=str(run), stages=("rl",), rl=rl), log=lambda *_: None)["rl"]
    return metrics, sampled_or_rate(run, "rl/policy", max_new_tokens=MAX_NEW)


def test_the_task_starts_low_and_the_prm_carries_signal(base):
    _, prm, sft_or = base
    assert sft_or <= 0.35, f"the SFT policy already solves {sft_or:.2f} of the task: it would not test learning"
    assert sft_or >= 0.1, f"the SFT policy solves only {sft_or:.2f}: too few rewarded rollouts to learn from"
    assert prm["heldout"]["auc"] >= 0.8, prm["heldout"]


@pytest.mark.parametrize("algorithm", ONLINE + OFFLINE)
def test_rl_learns_from_reward(base, tmp_path, algorithm):
    _, _, sft_or = base
    metrics, after = _run_rl(base, tmp_path, algorithm, algorithm)
    bar = MIN_AFTER.get(algorithm, 0.6)
    assert after >= bar and after >= 2 * sft_or, f"{algorithm}: OR rate {sft_or:.2f} -> {after:.2f} (bar {bar})"
    if algorithm in ONLINE:  # the rollouts themselves got better over the run
        assert metrics["or_rate_last"] >= metrics["or_rate_first"] + 0.15, metrics


@pytest.mark.parametrize("algorithm", ONLINE + OFFLINE)
def test_rl_with_the_advantages_sign_flipped_does_not_learn(base, tmp_path, monkeypatch, algorithm):
    _, _, sft_or = base
    (_flip_online if algorithm in ONLINE else _flip_offline)(monkeypatch)
    _, after = _run_rl(base, tmp_path, algorithm, f"{algorithm}_flipped")
    assert after <= sft_or + 0.05, f"{algorithm} with flipped advantages: OR rate {sft_or:.2f} -> {after:.2f}"
