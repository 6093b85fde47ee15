"""Clipped policy-gradient loss of GRPO with per-token advantages (TRL GRPOTrainer._compute_loss semantics)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rewardsql_jax.rewards.kl import KL_ESTIMATORS, kl_estimate

from .aggregation import AGG_MODES, agg_normalisation, aggregate, masked_mean
from .registry import register
from .shapes import check_choice, check_rank, check_same_shape


def at_least_float32(x):
    """``x`` as an array of at least float32 precision (float64 stays float64): what the losses compute in."""
    return jnp.asarray(x).astype(jnp.promote_types(jnp.asarray(x).dtype, jnp.float32))


def per_token_advantages(advantages, shape):
    """Broadcast per-sequence advantages [B] to [B, T]; per-token [B, T] pass through (process/clause rewards)."""
    advantages = at_least_float32(advantages)
    if advantages.ndim == 1:
        if advantages.shape[0] != shape[0]:
            raise ValueError(f"advantages has shape {advantages.shape}; expected [{shape[0]}] or {list(shape)}.")
        return jnp.broadcast_to(advantages[:, None], shape)
    if tuple(advantages.shape) != tuple(shape):
        raise ValueError(f"advantages has shape {advantages.shape}; expected [{shape[0]}] or {list(shape)}.")
    return advantages


def clipped_surrogate(logprobs, old_logprobs, advantages, clip_eps_low: float, clip_eps_high: float):
    """PPO clipped surrogate per token (Schulman et al. 2017, Eq. 7; GRPO Eq. 3; DAPO clip-higher Eq. 10).

    ratio = exp(logp - old_logp); loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A).
    Returns (per_token_loss, ratio).
    """
    ratio = jnp.exp(logprobs - old_logprobs)
    clipped = jnp.clip(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = -jnp.minimum(ratio * advantages, clipped * advantages)
    return per_token, ratio


def clip_metrics(ratio, advantages, mask, clip_eps_low: float, clip_eps_high: float) -> dict:
    """Fractions of masked tokens whose ratio is clipped (TRL's clip_ratio/low_mean, high_mean, region_mean), and
    the importance ratio's masked mean and spread (1 and 0 on-policy: the sampler's log-probs are the policy's)."""
    low = (ratio < 1.0 - clip_eps_low) & (advantages < 0)
    high = (ratio > 1.0 + clip_eps_high) & (advantages > 0)
    ratio = jax.lax.stop_gradient(ratio)
    mean = masked_mean(ratio, mask)
    return {
        "ratio/mean": mean,
        "ratio/std": jnp.sqrt(masked_mean(jnp.square(ratio - mean), mask)),
        "ratio/max_abs_log": jnp.max(jnp.where(mask > 0, jnp.abs(jnp.log(ratio)), 0.0)),
        "clip_ratio/low": masked_mean(low.astype(jnp.float32), mask),
        "clip_ratio/high": masked_mean(high.astype(jnp.float32), mask),
        "clip_ratio/region": masked_mean((low | high).astype(jnp.float32), mask),
    }


def grpo_needs(options: dict) -> list[str]:
    """The optional inputs grpo uses with ``options``: reference log-probs for the KL term (beta != 0) and the
    policy's entropies for the bonus (entropy_coef != 0)."""
    wanted = {"ref_logprobs": options.get("beta", 0.0) != 0.0, "entropy": options.get("entropy_coef", 0.0) != 0.0}
    return [name for name, on in wanted.items() if on]


@register(
    "grpo",
    family="policy_gradient",
    reduction=functools.partial(agg_normalisation, default="grpo"),
    needs=grpo_needs,
)
def grpo(
    logprobs,
    old_logprobs,
    advantages,
    mask,
    *,
    ref_logprobs=None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    beta: float = 0.0,
    kl: str = "k3",
    agg: str = "grpo",
    max_len: int | None = None,
    kl_clamp: float | None = None,
    kl_log_ratio_clamp: float | None = None,
    entropy=None,
    entropy_coef: float = 0.0,
    num_items_in_batch=None,
):
    """GRPO policy loss (Shao et al. 2024, DeepSeekMath Eq. 3; Reward-SQL Sec. 5.3 L_GRPO), as TRL computes it.

    per_token = -min(r*A, clip(r, 1-eps, 1+eps_high)*A) + beta * KL_t - entropy_coef * H_t,  r = exp(logp - old_logp),
    then reduced over the mask by `agg` (see aggregation.aggregate). Advantages may be per token [B, T], so
    Reward-SQL step advantages and EXPO-SQL clause rewards plug in directly; [B] is broadcast over tokens.

    Args:
      logprobs: [B, T] log-probs of the sampled tokens under the current policy (differentiated).
      old_logprobs: [B, T] log-probs under the sampling policy (treated as constants); None means logprobs
        with stop-gradient (TRL with num_iterations=1: ratio 1, gradient A * grad logp).
      advantages: [B] or [B, T].
      mask: [B, T] 1 on completion tokens, 0 on prompt/padding.
      ref_logprobs: [B, T] reference-policy log-probs; required when beta > 0 (then "kl" is also reported).
      clip_eps / clip_eps_high: lower / upper clip (clip_eps_high None -> clip_eps; DAPO uses 0.28).
      beta: KL coefficient (Reward-SQL: 0.001); kl: "k1" | "k2" | "k3" (TRL default k3); kl_clamp,
        kl_log_ratio_clamp: optional clamps (kl.kl_estimate).
      agg: "grpo" | "bnpo" | "dr_grpo" | "dapo" | "token_mean"; max_len for dr_grpo (default T);
        num_items_in_batch for dapo (default: active tokens in this call).
      entropy: optional [B, T] per-token entropies, subtracted with entropy_coef (verl entropy_coeff).
    Returns:
      (loss, metrics) with metrics clip_ratio/{low,high,region}, kl (when ref given), entropy (when given).
    """
    check_rank("logprobs", logprobs, 2, "[B, T]")
    check_same_shape(
        "logprobs", logprobs, old_logprobs=old_logprobs, mask=mask, ref_logprobs=ref_logprobs, entropy=entropy
    )
    check_choice("agg", agg, AGG_MODES)
    check_choice("kl", kl, KL_ESTIMATORS)
    if beta != 0.0 and ref_logprobs is None:
        raise ValueError(
            "beta != 0 needs ref_logprobs (the reference policy's per-token log-probs); pass them or set beta=0.0."
        )
    logprobs = at_least_float32(logprobs)
    # old and ref log-probs are constants of the objective (TRL computes them under no_grad)
    old = jax.lax.stop_gradient(logprobs if old_logprobs is None else at_least_float32(old_logprobs))
    adv = per_token_advantages(advantages, logprobs.shape)
    mask = at_least_float32(mask)
    eps_low = clip_eps
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high

    per_token, ratio = clipped_surrogate(logprobs, old, adv, eps_low, eps_high)
    metrics = clip_metrics(ratio, adv, mask, eps_low, eps_high)
    if ref_logprobs is not None:
        per_token_kl = kl_estimate(
            logprobs,
            jax.lax.stop_gradient(at_least_float32(ref_logprobs)),
            kl,
            clamp=kl_clamp,
            log_ratio_clamp=kl_log_ratio_clamp,
        )
        if beta != 0.0:
            per_token = per_token + beta * per_token_kl
        metrics["kl"] = masked_mean(per_token_kl, mask)
    if entropy is not None:
        entropy = at_least_float32(entropy)
        if entropy_coef != 0.0:
            per_token = per_token - entropy_coef * entropy
        metrics["entropy"] = masked_mean(entropy, mask)
    elif entropy_coef != 0.0:
        raise ValueError("entropy_coef != 0 needs entropy= (per-token entropies [B, T]); pass them or set 0.0.")
    loss = aggregate(per_token, mask, agg, max_len=max_len, num_items_in_batch=num_items_in_batch)
    return loss, metrics
