"""Pure, jit-able training losses, registered by name: ``losses.get("grpo")(...) -> (loss, metrics)``.

Built-ins: ``sft``, ``prm`` (Reward-SQL PRM), ``dpo``, ``grpo`` (policy-gradient family with per-token
advantages, k1/k2/k3 KL, TRL aggregation modes), ``reinforce_pp`` (REINFORCE++ / EXPO-SQL), ``rs``
(rejection-sampling fine-tuning). Each takes arrays plus keyword-only options and returns a scalar loss and a
dict of scalar metrics; static options go through ``functools.partial`` before ``jax.jit``.

Adding your own loss takes one small file; import it before the config is resolved and name it in the config
(``loss="my_pg"``)::

    # my_losses/my_pg.py
    import jax.numpy as jnp
    from rewardsql_jax import losses

    @losses.register("my_pg")
    def my_pg(logprobs, old_logprobs, advantages, mask, *, scale=1.0):
        \"\"\"Vanilla policy gradient, -A * logp averaged over completion tokens (Williams 1992, Eq. 11).\"\"\"
        per_token = -scale * advantages[:, None] * logprobs
        loss = jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), 1.0)
        return loss, {"adv_mean": jnp.mean(advantages)}

    losses.get("my_pg") is my_pg   # True; losses.names() now lists it

Reusable pieces: ``losses.aggregate`` (the grpo/bnpo/dr_grpo/dapo/token_mean reductions), ``losses.kl_estimate``
and ``losses.clipped_surrogate``.
"""

from .aggregation import AGG_MODES, aggregate, masked_mean
from .dpo import dpo
from .grpo import clipped_surrogate, grpo, per_token_advantages
from .kl import KL_ESTIMATORS, kl_estimate
from .prm import prm, step_scores
from .registry import get, names, register
from .reinforce_pp import reinforce_pp
from .rs import rs
from .sft import sft, token_nll

__all__ = [
    "AGG_MODES", "KL_ESTIMATORS", "aggregate", "clipped_surrogate", "dpo", "get", "grpo", "kl_estimate",
    "masked_mean", "names", "per_token_advantages", "prm", "register", "reinforce_pp", "rs", "sft", "step_scores",
    "token_nll",
]
