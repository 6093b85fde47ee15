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

import pytest

from learning_task import BUDGETS, MIN_AFTER, OFFLINE, ONLINE, flip_advantages, learning_base, rl_or_rate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Cold start of the task, a 150-step SFT, PRM labels by MCTS over the SFT policy's rollouts and a trained
    PRM: the shared start of every RL run (each copies it). Also the SFT policy's OR rate."""
    return learning_base(tmp_path_factory.mktemp("learning") / "base")


def test_the_task_starts_low_and_the_prm_carries_signal(base):
    _, prm, sft_or = base
    assert sft_or <= 0.35, f"the SFT policy already solves {sft_or:.2f} of the task: it would not test learning"
    assert sft_or >= 0.1, f"the SFT policy solves only {sft_or:.2f}: too few rewarded rollouts to learn from"
    assert prm["heldout"]["auc"] >= 0.8, prm["heldout"]


@pytest.mark.parametrize("algorithm", ONLINE + OFFLINE)
def test_rl_learns_from_reward(base, tmp_path, algorithm):
    _, _, sft_or = base
    metrics, after = rl_or_rate(base, tmp_path / algorithm, algorithm, BUDGETS[algorithm])
    bar = MIN_AFTER.get(algorithm, 0.6)
    assert after >= bar and after >= 2 * sft_or, f"{algorithm}: OR rate {sft_or:.2f} -> {after:.2f} (bar {bar})"
    if algorithm in ONLINE:  # the rollouts themselves got better over the run
        assert metrics["or_rate_last"] >= metrics["or_rate_first"] + 0.15, metrics


@pytest.mark.parametrize("algorithm", ONLINE + OFFLINE)
def test_rl_with_the_advantages_sign_flipped_does_not_learn(base, tmp_path, monkeypatch, algorithm):
    _, _, sft_or = base
    flip_advantages(monkeypatch, algorithm)
    _, after = rl_or_rate(base, tmp_path / f"{algorithm}_flipped", algorithm, BUDGETS[algorithm])
    assert after <= sft_or + 0.05, f"{algorithm} with flipped advantages: OR rate {sft_or:.2f} -> {after:.2f}"
