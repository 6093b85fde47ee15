from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses
from rewardsql_jax.rewards import masked_whiten

RNG = np.random.default_rng(3)
B, T = 3, 6
LOGP = jnp.asarray(-np.abs(RNG.normal(1.0, 0.5, (B, T))), jnp.float32)
REF = LOGP + jnp.asarray(RNG.normal(0, 0.3, (B, T)), jnp.float32)
MASK = jnp.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], jnp.float32)
# EXPO-SQL clause rewards filled over each clause's tokens (wrong SELECT, correct FROM/WHERE, ...)
REWARDS = jnp.array([[0.5, 0.5, -0.5, -0.5, 0.5, 0.5], [1.5, 1.5, 1.5, 0, 0, 0], [-1.5, -1.5, -0.5, -0.5, 0, 0]])


def test_gradient_is_expo_sql_eq4_without_whitening():
    """EXPO-SQL Eq. 4: L = -E[sum_t (r_c - beta KL_t) log pi(t)]; at ratio 1, gamma=0 and no whitening the
    gradient per token is -(r_t - beta (old - ref)_t) m_t / sum(m)."""
    beta = 0.01
    f = partial(losses.reinforce_pp, ref_logprobs=REF, kl_coef=beta, gamma=0.0, whiten=False)
    grad = jax.grad(lambda lp: f(lp, None, REWARDS, MASK)[0])(LOGP)
    expected = -(REWARDS - beta * (LOGP - REF)) * MASK / MASK.sum()
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-8)


def test_default_uses_whitened_return_to_go():
    returns = np.cumsum(np.asarray(REWARDS * MASK)[:, ::-1], axis=1)[:, ::-1]
    adv = np.asarray(masked_whiten(returns, MASK)) * np.asarray(MASK)
    grad_on = jax.grad(lambda lp: jax.jit(losses.reinforce_pp)(lp, None, REWARDS, MASK)[0])(LOGP)
    np.testing.assert_allclose(grad_on, -adv / float(MASK.sum()), rtol=1e-5, atol=1e-7)
    # old_logprobs is a constant of the loss (rollout log-probs): passing the same array changes nothing
    grad_same = jax.grad(lambda lp: losses.reinforce_pp(lp, lp, REWARDS, MASK)[0])(LOGP)
    np.testing.assert_allclose(grad_same, grad_on, rtol=1e-6, atol=1e-8)


def test_metrics_and_errors():
    _, m = losses.reinforce_pp(LOGP, LOGP, REWARDS, MASK, ref_logprobs=REF, kl_coef=0.1)
    assert float(m["kl"]) == pytest.approx(float(((LOGP - REF) * MASK).sum() / MASK.sum()), rel=1e-5)
    assert {"clip_ratio/low", "clip_ratio/high", "returns/mean", "rewards/mean"} <= set(m)
    with pytest.raises(ValueError, match="ref_logprobs"):
        losses.reinforce_pp(LOGP, LOGP, REWARDS, MASK, kl_coef=0.1)
    with pytest.raises(ValueError, match="token_rewards"):
        losses.reinforce_pp(LOGP, LOGP, REWARDS[:, :4], MASK)
    with pytest.raises(ValueError, match="dual_clip"):
        losses.reinforce_pp(LOGP, LOGP, REWARDS, MASK, dual_clip=0.5)
