"""REINFORCE++ returns: KL-in-reward, discounted return-to-go and global masked whitening.

Follows verl (trainer/ppo/core_algos.py: apply_kl_penalty, compute_reinforce_plus_plus_outcome_advantage;
utils/torch_functional.py: masked_whiten) and OpenRLHF, for REINFORCE++ (Hu 2025, arXiv:2501.03262) and
EXPO-SQL's clause-level objective (Eq. 4): token rewards are the clause rewards r_c filled over each clause's
tokens (or an outcome reward at the last token), minus beta * KL per token.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .kl import kl_estimate


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ReinforcePPReturns:
    """Output of `reinforce_pp_returns`: all [B, T], zero outside the mask where noted."""

    advantages: jax.Array  # whitened returns * mask
    returns: jax.Array  # discounted return-to-go of `rewards`
    rewards: jax.Array  # token rewards after the KL penalty


def _check_bt(name, x, ref_shape):
    if tuple(jnp.shape(x)) != tuple(ref_shape):
        raise ValueError(
            f"{name} has shape {tuple(jnp.shape(x))}; expected {tuple(ref_shape)} like token_rewards "
            f"([B, T], padded to the same length)."
        )


def outcome_token_rewards(outcomes, mask):
    """Place a per-sequence reward [B] on the last masked token of each row -> [B, T] (OpenRLHF compute_reward)."""
    mask = jnp.asarray(mask, jnp.float32)
    if mask.ndim != 2 or jnp.shape(outcomes) != (mask.shape[0],):
        raise ValueError(f"outcomes must be [B] and mask [B, T]; got {jnp.shape(outcomes)} and {mask.shape}.")
    t = mask.shape[1]
    last = t - 1 - jnp.argmax(mask[:, ::-1] > 0, axis=1)
    onehot = jax.nn.one_hot(last, t, dtype=jnp.float32) * (jnp.sum(mask, axis=1, keepdims=True) > 0)
    return onehot * jnp.asarray(outcomes, jnp.float32)[:, None]


def kl_penalized_rewards(token_rewards, old_logprobs, ref_logprobs, mask, kl_coef: float, kind: str = "k1"):
    """r_t - kl_coef * KL_t(old || ref) * m_t (verl apply_kl_penalty; EXPO-SQL Eq. 4's r_c - beta * D_KL^(i)).

    The KL is taken between the sampling policy's log-probs and the reference (a constant per rollout).
    """

    mask = jnp.asarray(mask, jnp.float32)
    kl = kl_estimate(jnp.asarray(old_logprobs, jnp.float32), jnp.asarray(ref_logprobs, jnp.float32), kind)
    return jnp.asarray(token_rewards, jnp.float32) - kl_coef * kl * mask


def discounted_returns(token_rewards, mask, gamma: float = 1.0):
    """Return-to-go G_t = r_t + gamma * G_{t+1}, reset after masked-out positions (verl REINFORCE++ loop).

    Exactly verl's recursion: running = r_t + gamma * running; G_t = running; running *= m_t (scanning t
    backwards), so padding after the response never leaks into it. gamma=0 gives G_t = r_t: EXPO-SQL Eq. 4,
    where each token is weighted by its own clause reward.
    """
    rewards = jnp.asarray(token_rewards, jnp.float32)
    mask = jnp.asarray(mask, jnp.float32)

    def step(running, xs):
        r_t, m_t = xs
        running = r_t + gamma * running
        return running * m_t, running

    _, returns = jax.lax.scan(step, jnp.zeros(rewards.shape[0], jnp.float32), (rewards.T, mask.T), reverse=True)
    return returns.T


def masked_whiten(values, mask, *, shift_mean: bool = True, unbiased: bool = True, eps: float = 1e-8):
    """(v - mean) / sqrt(var + eps) with mean and variance over all masked entries (verl masked_whiten).

    The variance is unbiased (Bessel n / (n - 1)) as in verl; with a single active token (n = 1), where verl
    raises, the correction is skipped. shift_mean=False adds the mean back.
    """
    values = jnp.asarray(values, jnp.float32)
    mask = jnp.asarray(mask, jnp.float32)
    n = jnp.sum(mask)
    mean = jnp.sum(values * mask) / jnp.maximum(n, 1.0)
    var = jnp.sum(jnp.square(values - mean) * mask) / jnp.maximum(n, 1.0)
    if unbiased:
        var = var * jnp.where(n > 1, n / jnp.maximum(n - 1.0, 1.0), 1.0)
    whitened = (values - mean) * jax.lax.rsqrt(var + eps)
    return whitened if shift_mean else whitened + mean


def reinforce_pp_returns(
    token_rewards,
    mask,
    *,
    gamma: float = 1.0,
    old_logprobs=None,
    ref_logprobs=None,
    kl_coef: float = 0.0,
    kl: str = "k1",
    whiten: bool = True,
) -> ReinforcePPReturns:
    """REINFORCE++ advantages (Hu 2025, Sec. 3; verl compute_reinforce_plus_plus_outcome_advantage).

    rewards = token_rewards - kl_coef * KL(old || ref) (when kl_coef != 0);
    returns = discounted_returns(rewards, mask, gamma);
    advantages = masked_whiten(returns, mask) * mask (global over the batch; whiten=False keeps raw returns).
    Everything is computed without gradient (advantages are constants of the policy loss).
    """
    rewards = jnp.asarray(token_rewards, jnp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"token_rewards must be a 2-D array [B, T], got shape {rewards.shape}.")
    _check_bt("mask", mask, rewards.shape)
    mask = jnp.asarray(mask, jnp.float32)
    if kl_coef != 0.0:
        if old_logprobs is None or ref_logprobs is None:
            raise ValueError("kl_coef != 0 needs old_logprobs and ref_logprobs ([B, T]); pass them or set kl_coef=0.")
        _check_bt("old_logprobs", old_logprobs, rewards.shape)
        _check_bt("ref_logprobs", ref_logprobs, rewards.shape)
        rewards = kl_penalized_rewards(rewards, old_logprobs, ref_logprobs, mask, kl_coef, kl)
    rewards = jax.lax.stop_gradient(rewards)
    returns = discounted_returns(rewards, mask, gamma)
    advantages = (masked_whiten(returns, mask) if whiten else returns) * mask
    return ReinforcePPReturns(advantages=advantages, returns=returns, rewards=rewards)
