"""REINFORCE++ with EXPO-SQL clause rewards (EXPO-SQL Sec. 3.3, Eq. 4): each clause's reward on its tokens,
KL to the SFT policy in the reward (k1, ``rl.kl_beta``), gamma 0 so each token is weighted by its own clause
reward, returns whitened over the whole batch inside the loss; loss ``reinforce_pp``."""

from __future__ import annotations

import numpy as np

from rewardsql_jax.rewards.rollout_rewards import clause_token_rewards

from ..algorithm import OnlineAlgorithm, register_algorithm
from ..batches import Update


@register_algorithm
class ReinforcePP(OnlineAlgorithm):
    name = "reinforce_pp"
    loss = "reinforce_pp"
    clause_rewards = True
    group_normalised = False  # EXPO-SQL samples one completion per question
    batch_field = "token_rewards"

    def loss_options(self, rl) -> dict:
        return {"clip_eps": rl.clip_eps, "kl_coef": rl.kl_beta, "kl": "k1", "gamma": 0.0}

    def validate(self, config) -> None:
        rl = config.rl
        if rl.loss and rl.loss != self.loss:
            raise ValueError(
                f"rl.algorithm='reinforce_pp' fills per-token rewards that only its own loss turns into "
                f"returns; rl.loss={rl.loss!r} needs advantages: use a grpo algorithm with it"
            )
        if rl.entropy_coef != 0.0:
            raise ValueError(
                f"rl.entropy_coef={rl.entropy_coef}: the REINFORCE++ loss has no entropy bonus; "
                f"set rl.entropy_coef=0.0 or use a grpo algorithm"
            )
        super().validate(config)

    def update(self, rollouts, prm_scores, rl) -> Update:
        values = [
            clause_token_rewards(c, cl, gold_ok=ok)
            for c, cl, ok in zip(rollouts.completions, rollouts.clauses, rollouts.outcomes.gold_ok)
        ]
        per_seq = np.asarray([v.mean() if len(v) else 0.0 for v in values], np.float32)
        return Update(rewards=per_seq, token_values=values)
