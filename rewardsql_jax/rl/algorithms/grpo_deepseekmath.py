"""GRPO with DeepSeekMath process supervision (Reward-SQL appendix A.3.1): PRM step scores normalised over the
group, each token's advantage the sum of the normalised scores of its step and the later ones; loss ``grpo``."""

from __future__ import annotations

from ..algorithm import register_algorithm
from ..batches import Update
from .grpo import GroupRelativeAlgorithm, process_update


@register_algorithm
class GRPODeepSeekMath(GroupRelativeAlgorithm):
    name = "grpo_deepseekmath"
    needs_prm = True

    def update(self, rollouts, prm_scores, rl) -> Update:
        return process_update(rollouts, prm_scores, rl, variant="deepseekmath", with_outcome=False)
