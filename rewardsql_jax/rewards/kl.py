"""Per-token KL estimators between the policy and a reference policy (the KL penalty in REINFORCE++'s rewards,
``returns.kl_penalized_rewards``, and the losses' KL terms, ``losses.kl_estimate``).

Estimators of KL(pi_theta || pi_ref) from a sample of pi_theta (J. Schulman, "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html), with log_ratio = logp - ref_logp:
  k1 = log_ratio
  k2 = 0.5 * log_ratio ** 2
  k3 = exp(-log_ratio) - (-log_ratio) - 1 = exp(ref - logp) - (ref - logp) - 1
k3 is TRL GRPOTrainer's per_token_kl and the Reward-SQL Section 5.3 estimator (unbiased, non-negative).
verl's "low_var_kl" is k3 with the log-ratio clamped to [-20, 20] and the estimate to [-10, 10]:
``kl_estimate(..., "k3", log_ratio_clamp=20.0, clamp=10.0)``.
"""

from __future__ import annotations

import jax.numpy as jnp

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logprobs, ref_logprobs, kind: str = "k3", *, clamp: float | None = None, log_ratio_clamp: float | None = None
):
    """Per-token KL(pi || pi_ref) estimate (Schulman's k1/k2/k3; k3 = TRL GRPO / Reward-SQL Sec. 5.3 KL).

    Args:
      logprobs: [...] log-probs of the sampled tokens under the policy (gradients flow through these).
      ref_logprobs: [...] log-probs of the same tokens under the frozen reference policy.
      kind: "k1", "k2" or "k3".
      clamp: if set, the estimate is clamped to [-clamp, clamp] (verl low_var_kl uses 10).
      log_ratio_clamp: if set, logp - ref_logp is clamped to [-c, c] before the estimator (verl uses 20).
    Returns:
      [...] per-token estimate, same shape as `logprobs`.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"kl={kind!r} is not a KL estimator; choose one of {list(KL_ESTIMATORS)}.")
    log_ratio = logprobs - ref_logprobs
    if log_ratio_clamp is not None:
        log_ratio = jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    if kind == "k1":
        kl = log_ratio
    elif kind == "k2":
        kl = 0.5 * jnp.square(log_ratio)
    else:
        # Written as in TRL (exp(ref - logp) - (ref - logp) - 1) so fp32 rounding matches the reference.
        neg = -log_ratio
        kl = jnp.exp(neg) - neg - 1.0
    if clamp is not None:
        kl = jnp.clip(kl, -clamp, clamp)
    return kl
