"""REINFORCE++ policy loss (Hu 2025; EXPO-SQL Eq. 4 with per-clause token rewards), as in verl / OpenRLHF."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rewardsql_jax.rewards.returns import reinforce_pp_returns

from .aggregation import AGG_MODES, agg_normalisation, aggregate, masked_mean
from .grpo import at_least_float32, clip_metrics, clipped_surrogate
from .registry import Prepared, register
from .shapes import check_choice, check_rank, check_same_shape

# the options of the returns (the whole-batch part of REINFORCE++)
RETURN_OPTIONS = ("kl_coef", "gamma", "kl", "whiten")


def reinforce_pp_prepare(old_logprobs, ref_logprobs, token_rewards, mask, **options) -> Prepared:
    """REINFORCE++'s returns and whitening over the whole batch, before it splits into micro-batches (verl whitens
    over the whole rollout batch): A = masked_whiten(G), G_t = sum_{k>=t} gamma^(k-t) (r_k - kl_coef * KL_k).

    Each micro-batch then runs ``reinforce_pp`` on these fixed advantages with gamma=0, no KL and no whitening,
    which makes its A_t = r_t: the clipped loss of the docstring below on the whole batch's advantages.
    """
    returns = {k: options[k] for k in RETURN_OPTIONS if k in options}
    rr = reinforce_pp_returns(token_rewards, mask, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, **returns)
    metrics = {"returns/mean": masked_mean(rr.returns, mask), "rewards/mean": masked_mean(rr.rewards, mask)}
    if ref_logprobs is not None:
        metrics["kl"] = masked_mean(old_logprobs - ref_logprobs, mask)
    rest = {k: v for k, v in options.items() if k not in RETURN_OPTIONS}
    loss_options = {**rest, "gamma": 0.0, "kl_coef": 0.0, "whiten": False}
    return Prepared(jax.lax.stop_gradient(rr.advantages), metrics, loss_options)


@register(
    "reinforce_pp",
    family="policy_gradient",
    reduction=functools.partial(agg_normalisation, default="token_mean"),
    needs=lambda options: ["ref_logprobs"] if options.get("kl_coef", 0.0) != 0.0 else [],
    prepare=reinforce_pp_prepare,
)
def reinforce_pp(
    logprobs,
    old_logprobs,
    token_rewards,
    mask,
    *,
    ref_logprobs=None,
    kl_coef: float = 0.0,
    clip_eps: float = 0.2,
    gamma: float = 1.0,
    clip_eps_high: float | None = None,
    kl: str = "k1",
    whiten: bool = True,
    dual_clip: float | None = None,
    agg: str = "token_mean",
):
    """REINFORCE++: KL-in-reward, return-to-go, global whitening, then the PPO-clip loss (verl defaults).

    A = masked_whiten(G), G_t = sum_{k>=t} gamma^(k-t) (r_k - kl_coef * KL_k(old || ref)) (rewards/returns.py),
    per_token = -min(r*A, clip(r, 1-eps, 1+eps_high)*A) with r = exp(logp - old_logp), token-mean over the mask.
    With old_logprobs equal to logprobs (one update per rollout) the gradient is EXPO-SQL Eq. 4's
    -sum (r_c - beta D_KL) grad log pi, using the whitened returns as weights; gamma=0 weights each token by its
    own clause reward exactly as Eq. 4 writes it, gamma=1 is the REINFORCE++ return-to-go.

    Args:
      logprobs, old_logprobs (None -> stop_gradient(logprobs)), token_rewards, mask: [B, T].
      ref_logprobs: [B, T]; required when kl_coef != 0 (EXPO-SQL: 0.01). kl: estimator in the reward (verl "kl"=k1).
      dual_clip: optional dual-clip constant c > 1 for negative advantages (verl clip_ratio_c; off by default).
    Returns: (loss, metrics) with clip_ratio/{low,high,region}, returns/mean, rewards/mean and kl when ref given.
    """
    check_rank("logprobs", logprobs, 2, "[B, T]")
    check_same_shape(
        "logprobs",
        logprobs,
        old_logprobs=old_logprobs,
        token_rewards=token_rewards,
        mask=mask,
        ref_logprobs=ref_logprobs,
    )
    check_choice("agg", agg, AGG_MODES)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1.0 (verl's clip_ratio_c, e.g. 3.0), got {dual_clip}.")
    logprobs = at_least_float32(logprobs)
    old = jax.lax.stop_gradient(logprobs if old_logprobs is None else at_least_float32(old_logprobs))
    mask = at_least_float32(mask)
    ref = None if ref_logprobs is None else jax.lax.stop_gradient(at_least_float32(ref_logprobs))
    rr = reinforce_pp_returns(
        token_rewards, mask, gamma=gamma, old_logprobs=old, ref_logprobs=ref, kl_coef=kl_coef, kl=kl, whiten=whiten
    )
    adv = jax.lax.stop_gradient(rr.advantages)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    per_token, ratio = clipped_surrogate(logprobs, old, adv, clip_eps, eps_high)
    if dual_clip is not None:
        per_token = jnp.where(adv < 0, jnp.minimum(-adv * dual_clip, per_token), per_token)
    metrics = clip_metrics(ratio, adv, mask, clip_eps, eps_high)
    metrics["returns/mean"] = masked_mean(rr.returns, mask)
    metrics["rewards/mean"] = masked_mean(rr.rewards, mask)
    if ref is not None:
        metrics["kl"] = masked_mean(old - ref, mask)
    return aggregate(per_token, mask, agg), metrics
