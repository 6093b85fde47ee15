"""GRPO with outcome rewards only: OR per completion, per-sequence group z-scores (DeepSeekMath Sec. 4.1.2
outcome supervision); loss ``grpo``. Needs no PRM."""

from __future__ import annotations

from rewardsql_jax.rewards.rollout_rewards import outcome_advantages

from ..algorithm import register_algorithm
from ..batches import Update
from .grpo import GroupRelativeAlgorithm


@register_algorithm
class GRPOOutcome(GroupRelativeAlgorithm):
    name = "grpo_outcome"

    def update(self, rollouts, prm_scores, rl) -> Update:
        outcomes = rollouts.outcomes.rewards
        return Update(rewards=outcomes, advantages=outcome_advantages(outcomes, rl.samples_per_prompt))
