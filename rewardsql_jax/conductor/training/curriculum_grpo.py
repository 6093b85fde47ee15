"""SQLConductor's curriculum GRPO as a registered RL algorithm (SQLConductor Sec. 4.4, Curriculum RL).

Each of the G rollouts of a question is one multi-step episode of the orchestration policy, scored by the
execution reward R = lambda * R_exec + (1 - lambda) * (ExecF1 + bonus * exact) (``rewards.py``); its advantage
is the group z-score A_i = (r_i - mean) / (std + delta) (``rewards.group_advantages``), one per episode, on
every token the policy wrote; ``rl.credit=step`` gives each decision its own A_{i,t} = R_i - b_{i,t} instead
(``rewards.step_advantages``: b = the reward of stopping there). The loss is the clipped GRPO surrogate with k3 KL to the SFT policy
(``losses.grpo``: clip ``rl.clip_eps``, KL weight ``rl.kl_beta``, log-probs at the sampling temperature).
The conductor's GRPO loop (``grpo.py``) asks the registry for this algorithm's loss, options and update.
"""

from __future__ import annotations

import numpy as np

from rewardsql_jax.rewards import group_advantages
from rewardsql_jax.rl import OnlineAlgorithm, Update, register_algorithm

from ..rewards import step_advantages

NAME = "conductor_curriculum_grpo"


@register_algorithm
class ConductorCurriculumGRPO(OnlineAlgorithm):
    """``update(records, None, rl)``: the episode records' rewards and their group advantages (no PRM)."""

    name = NAME
    loss = "grpo"

    def loss_options(self, rl) -> dict:
        """Options of ``losses.grpo`` from a ``ConductorRLConfig`` (``rl.loss_options`` over them, as in ``RLConfig``)."""
        return {"clip_eps": rl.clip_eps, "beta": rl.kl_beta, "temperature": rl.temperature, **dict(rl.loss_options)}

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
        """Checks of a ``ConductorRunConfig``; the Reward-SQL pipeline's ``rl.algorithm`` cannot select it."""
        if getattr(config, "pipeline", None) != "conductor":
            raise ValueError(
                f"rl.algorithm={NAME!r} trains SQLConductor's orchestration policy "
                f"(configs/conductor_*.py); the Reward-SQL RL stage cannot run it"
            )
        m, g = config.mesh.micro_batches, config.rl.samples_per_prompt
        if g % m:
            raise ValueError(
                f"mesh.micro_batches={m} must divide rl.samples_per_prompt={g}: a GRPO batch is whole groups "
                f"of rollouts and a step may have fewer than rl.prompts_per_step hard questions"
            )
