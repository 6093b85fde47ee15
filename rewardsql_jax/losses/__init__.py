"""Pure, jit-able training losses, registered by name: ``losses.get("grpo")(...) -> (loss, metrics)``.

Built-ins: ``sft``, ``prm`` (Reward-SQL PRM), ``dpo``, ``grpo`` (policy-gradient family with per-token
advantages, k1/k2/k3 KL, TRL aggregation modes), ``reinforce_pp`` (REINFORCE++ / EXPO-SQL), ``rs``
(rejection-sampling fine-tuning). Each takes arrays plus keyword-only options and returns a scalar loss and a
dict of scalar metrics; static options go through ``functools.partial`` before ``jax.jit``.

Adding your own loss takes one small file: register it with its family (``registry.py`` says what each family
receives), load the file with ``plugins=path/to/my_pg.py`` and select it with ``rl.loss=my_pg``::

    # my_pg.py
    import jax.numpy as jnp
    from rewardsql_jax import losses

    @losses.register("my_pg", family="policy_gradient")
    def my_pg(logprobs, old_logprobs, advantages, mask, *, scale=1.0):
        \"\"\"Vanilla policy gradient, -A * logp averaged over completion tokens (Williams 1992, Eq. 11).\"\"\"
        per_token = -scale * advantages * logprobs
        loss = jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), 1.0)
        return loss, {"my_pg/adv_mean": jnp.sum(advantages * mask) / jnp.maximum(jnp.sum(mask), 1.0)}

    losses.get("my_pg") is my_pg   # True; losses.names("policy_gradient") now lists it

A loss's ``reduction`` (default token_mean) is what its mean divides by, so the train step accumulates
micro-batches exactly (``normalisation.py``: one table of denominators; ``reduction="custom"`` for a loss that
returns its own (numerator, denominator, metrics)).

Reusable pieces: ``losses.aggregate`` (the grpo/bnpo/dr_grpo/dapo/token_mean reductions), ``losses.kl_estimate``
and ``losses.clipped_surrogate``.
"""

from rewardsql_jax.rewards.kl import KL_ESTIMATORS, kl_estimate

from .aggregation import AGG_MODES, agg_normalisation, aggregate, masked_mean
from .dpo import dpo
from .grpo import clipped_surrogate, grpo, per_token_advantages
from .normalisation import DENOMINATORS, Normalisation, WeightedLoss, weighted_loss
from .prm import prm, step_scores
from .registry import FAMILIES, REDUCTIONS, LossSpec, Prepared, family, get, names, register, spec
from .reinforce_pp import reinforce_pp
from .rs import rs
from .sft import sft, token_nll

__all__ = [
    "AGG_MODES",
    "DENOMINATORS",
    "FAMILIES",
    "KL_ESTIMATORS",
    "REDUCTIONS",
    "LossSpec",
    "Normalisation",
    "Prepared",
    "WeightedLoss",
    "agg_normalisation",
    "aggregate",
    "clipped_surrogate",
    "dpo",
    "family",
    "get",
    "grpo",
    "kl_estimate",
    "masked_mean",
    "names",
    "per_token_advantages",
    "prm",
    "register",
    "reinforce_pp",
    "rs",
    "sft",
    "spec",
    "step_scores",
    "token_nll",
    "weighted_loss",
]
