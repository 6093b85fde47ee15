"""The built-in RL algorithms, one module each; importing this package registers them."""

from . import dpo, grpo, grpo_deepseekmath, grpo_outcome, reinforce_pp, rs

__all__ = ["dpo", "grpo", "grpo_deepseekmath", "grpo_outcome", "reinforce_pp", "rs"]
