"""The per-token KL estimators, for the losses' KL terms: they live in ``rewardsql_jax.rewards.kl`` (REINFORCE++
puts KL in the reward, and rewards sit below losses in the layering), and ``losses.kl_estimate`` is the same function.
"""
from rewardsql_jax.rewards.kl import KL_ESTIMATORS, kl_estimate

__all__ = ["KL_ESTIMATORS", "kl_estimate"]
