"""GRPO with process and outcome rewards (Reward-SQL Sec. 5.3): R_i = PR + OR, step advantages on each step's
tokens (``rl.algorithm_options.advantage_variant``: "paper" Sec. 5.3 | "released": the authors' trainer, PRM
weight ``rl.algorithm_options.rm_coef``); loss ``grpo`` with clip ``rl.clip_eps``, k3 KL ``rl.kl_beta`` to the
SFT policy and the entropy bonus ``rl.entropy_coef`` (paper: 0.001)."""

from __future__ import annotations

import dataclasses

import numpy as np

from rewardsql_jax.rewards.rollout_rewards import (
    outcome_only_released_advantages,
    process_reward,
    process_token_advantages,
)

from ..algorithm import OnlineAlgorithm, get_algorithm, register_algorithm
from ..batches import Update

VARIANTS = ("paper", "released")


@dataclasses.dataclass(frozen=True)
class GRPOOptions:
    """``rl.algorithm_options`` of ``grpo``. ``advantage_variant``: the process advantage, "paper" (Sec. 5.3) or
    "released" (the authors' verl trainer). ``rm_coef``: the PRM weight in the released token rewards
    ``rm_coef * step score + outcome`` ("released" only; "paper" ignores it); 0 is the released
    ``grpo_trainer.yaml``: the outcome and the advantage on the last token only, and no PRM is loaded."""

    advantage_variant: str = "paper"
    rm_coef: float = 1.0

    def __post_init__(self):
        if self.advantage_variant not in VARIANTS:
            raise ValueError(
                f"rl.algorithm_options.advantage_variant={self.advantage_variant!r}; choose one of {list(VARIANTS)}"
            )
        if not self.rm_coef >= 0:
            raise ValueError(f"rl.algorithm_options.rm_coef must be >= 0, got {self.rm_coef}")


class GroupRelativeAlgorithm(OnlineAlgorithm):
    """The GRPO family's loss: the clipped surrogate with k3 KL to the reference (DeepSeekMath Eq. 3)."""

    loss = "grpo"

    def loss_options(self, rl) -> dict:
        opts = {"clip_eps": rl.clip_eps, "beta": rl.kl_beta, "kl": "k3"}
        if rl.entropy_coef != 0.0:
            opts["entropy_coef"] = rl.entropy_coef
        return opts


def process_update(rollouts, prm_scores, rl, *, variant: str, with_outcome: bool) -> Update:
    """Step advantages of ``variant`` on each step's tokens; logged reward PR (+ OR when ``with_outcome``). The
    "released" variant weights the PRM by grpo's ``rm_coef`` option (``rl.algorithm_options``)."""
    outcomes = rollouts.outcomes.rewards
    rm_coef = get_algorithm("grpo").options(rl).rm_coef if variant == "released" else 1.0
    values = process_token_advantages(
        rollouts.completions, prm_scores, outcomes, rl.samples_per_prompt, variant=variant, rm_coef=rm_coef
    )
    pr = np.asarray([process_reward(s) for s in prm_scores], np.float32)
    if variant == "released":
        pr = np.float32(rm_coef) * pr
    return Update(rewards=pr + outcomes if with_outcome else pr, token_values=values)


@register_algorithm
class GRPO(GroupRelativeAlgorithm):
    name = "grpo"
    needs_prm = True
    options_type = GRPOOptions
    moved_settings = {"advantage_variant": "advantage_variant", "rm_coef": "rm_coef"}

    def uses_prm(self, rl) -> bool:
        """The released recipe (``advantage_variant="released"``, ``rm_coef=0``) places no PRM value: no PRM."""
        opts = self.options(rl)
        return not (opts.advantage_variant == "released" and opts.rm_coef == 0)

    def update(self, rollouts, prm_scores, rl) -> Update:
        if not self.uses_prm(rl):  # what process_update gives with rm_coef=0, without PRM scores
            outcomes = rollouts.outcomes.rewards
            values = outcome_only_released_advantages(rollouts.completions, outcomes, rl.samples_per_prompt)
            return Update(rewards=np.asarray(outcomes, np.float32), token_values=values)
        variant = self.options(rl).advantage_variant
        return process_update(rollouts, prm_scores, rl, variant=variant, with_outcome=True)
