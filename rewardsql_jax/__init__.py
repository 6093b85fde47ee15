"""rewardsql_jax: JAX-native post-training of text-to-SQL models with process rewards and execution feedback.

Implements Reward-SQL (Chain-of-CTEs, PRM, GRPO/DPO/RS, PRM Best-of-N), EXPO-SQL (clause-level rewards)
and SQLConductor (learned orchestration) on one engine. See DESIGN.md and README.md.
"""

__version__ = "0.1.0"
