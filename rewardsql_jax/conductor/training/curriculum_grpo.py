"""SQLConductor's curriculum GRPO as a registered RL algorithm (SQLConductor Sec. 4.4, Curriculum RL).

Each of the G rollouts of a question is one multi-step episode of the orchestration policy, scored by the
execution reward R = lambda * R_exec + (1 - lambda) * (ExecF1 + bonus * exact) (``rewards.py``); its advantage
is the group z-score A_i = (r_i - mean) / (std + delta) (``rewards.group_advantages``), one per episode, on
every token the policy wrote; ``rl.credit=step`` gives each decision its own A_{i,t} = R_i - b_{i,t} instead
(``rewards.step_advantages``: b = the reward of stopping there). The loss is the clipped GRPO surrogate with k3 KL to the SFT policy
(``losses.grpo``: clip ``rl.clip_eps``, KL weight ``rl.kl_beta``, log-probs at the sampling temperature), or
``rl.loss`` with ``rl.loss_options`` as in the Reward-SQL pipeline: the conductor's GRPO loop (``grpo.py``) asks
``rl.policy_loss`` for it and the registry for this algorithm's update.
"""

from __future__ import annotations

import numpy as np

from rewardsql_jax.rewards import group_advantages
from rewardsql_jax.rl import Update, register_algorithm
from rewardsql_jax.rl.algorithms.grpo import GroupRelativeAlgorithm

from ..rewards import step_advantages

NAME = "conductor_curriculum_grpo"


@register_algorithm
class ConductorCurriculumGRPO(GroupRelativeAlgorithm):
    """``update(records, None, rl)``: the episode records' rewards and their group advantages (no PRM); the loss
    and its options are the GRPO family's (``rl.policy_loss``: ``rl.loss`` / ``rl.loss_options`` apply)."""

    name = NAME

    def update(self, rollouts, prm_scores, rl) -> Update:
        """``rollouts``: the evaluated episodes (``rollout.EpisodeRecord``), the G of a question contiguous.
        ``rl.credit=episode``: ``advantages`` [N]; ``step``: ``token_values``, one array per episode with one entry
        per policy decision (the episode source spreads each over that decision's tokens)."""
        rewards = np.asarray([r.reward for r in rollouts], np.float32)
        if rl.credit == "step":
            values = [r.step_values for r in rollouts]
            return Update(rewards=rewards, token_values=step_advantages(rewards, values, rl.samples_per_prompt))
        return Update(rewards=rewards, advantages=np.asarray(group_advantages(rewards, rl.samples_per_prompt)))

    def validate(self, config) -> None:
        """Checks of a ``ConductorRunConfig`` (``OnlineAlgorithm.validate``: the loss, G >= 2, the micro-batch
        layout); the Reward-SQL pipeline's ``rl.algorithm`` cannot select it."""
        if getattr(config, "pipeline", None) != "conductor":
            raise ValueError(
                f"rl.algorithm={NAME!r} trains SQLConductor's orchestration policy "
                f"(configs/conductor_*.py); the Reward-SQL RL stage cannot run it"
            )
        super().validate(config)
