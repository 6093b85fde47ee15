import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.rewards import (
    ReinforcePPReturns,
    discounted_returns,
    kl_penalized_rewards,
    masked_whiten,
    outcome_token_rewards,
    reinforce_pp_returns,
)

MASK = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_discounted_returns_by_hand_and_no_leak_from_padding():
    rewards = jnp.array([[1.0, 2.0, 3.0, 7.0], [0.0, -1.0, 5.0, 5.0]])  # padding carries junk rewards
    g = np.asarray(discounted_returns(rewards, MASK, gamma=0.5))
    np.testing.assert_allclose(g[0, :3], [1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0])
    np.testing.assert_allclose(g[1, :2], [-0.5, -1.0])
    np.testing.assert_allclose(discounted_returns(rewards, MASK, gamma=0.0)[:, :2], rewards[:, :2])


def test_masked_whiten_statistics():
    vals = jnp.array([[1.0, 2.0, 4.0, 100.0], [3.0, 8.0, -50.0, 9.0]])
    w = np.asarray(masked_whiten(vals, MASK))
    active = w[np.asarray(MASK) > 0]
    assert active.mean() == pytest.approx(0.0, abs=1e-6)
    assert active.std(ddof=1) == pytest.approx(1.0, rel=1e-5)  # verl: unbiased variance
    kept = np.asarray(masked_whiten(vals, MASK, shift_mean=False))[np.asarray(MASK) > 0]
    assert kept.mean() == pytest.approx(float(np.asarray(vals)[np.asarray(MASK) > 0].mean()), rel=1e-5)
    single = masked_whiten(vals, jnp.zeros_like(MASK).at[0, 0].set(1.0))
    assert np.isfinite(np.asarray(single)).all()


def test_outcome_at_last_token():
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(
        outcome_token_rewards(jnp.array([1.0, 2.0, 3.0]), mask), [[0, 0, 1, 0], [2, 0, 0, 0], [0, 0, 0, 0]]
    )


def test_kl_in_reward():
    r = jnp.ones((2, 4))
    old = jnp.full((2, 4), -1.0)
    ref = jnp.full((2, 4), -1.5)
    out = kl_penalized_rewards(r, old, ref, MASK, 0.1)
    np.testing.assert_allclose(out, 1.0 - 0.1 * 0.5 * MASK, rtol=1e-6)


def test_reinforce_pp_returns_is_a_jittable_frozen_dataclass():
    rewards = jnp.array([[0.5, 0.5, -1.5, 0.0], [1.5, 1.5, 0.0, 0.0]])
    res = jax.jit(reinforce_pp_returns)(rewards, MASK)
    assert isinstance(res, ReinforcePPReturns)
    with pytest.raises(AttributeError):
        res.returns = None
    np.testing.assert_allclose(res.advantages, masked_whiten(res.returns, MASK) * MASK, rtol=1e-6)
    assert float(jnp.abs(res.advantages * (1 - MASK)).max()) == 0.0
    with pytest.raises(ValueError, match="old_logprobs and ref_logprobs"):
        reinforce_pp_returns(rewards, MASK, kl_coef=0.1)
    with pytest.raises(ValueError, match="mask"):
        reinforce_pp_returns(rewards, MASK[:, :3])


def test_parity_with_verl_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    b, t = 5, 9
    mask = (np.arange(t)[None] < rng.integers(2, t + 1, size=b)[:, None]).astype(np.float32)
    rewards = (rng.choice([1.5, 0.5, -0.5, -1.5], size=(b, t)) * mask).astype(np.float32)
    old = rng.normal(-1, 0.3, (b, t)).astype(np.float32)
    ref = rng.normal(-1, 0.3, (b, t)).astype(np.float32)
    gamma, kl_coef = 0.95, 0.01
    # verl: apply_kl_penalty ("kl"), compute_reinforce_plus_plus_outcome_advantage, masked_whiten
    tr, tm = torch.tensor(rewards), torch.tensor(mask)
    tr = tr - kl_coef * (torch.tensor(old) - torch.tensor(ref)) * tm
    returns = torch.zeros_like(tr)
    running = 0
    for i in reversed(range(t)):
        running = tr[:, i] + gamma * running
        returns[:, i] = running
        running = running * tm[:, i]
    mean = (returns * tm).sum() / tm.sum()
    var = ((returns - mean) ** 2 * tm).sum() / tm.sum() * tm.sum() / (tm.sum() - 1)
    adv = (returns - mean) * torch.rsqrt(var + 1e-8) * tm
    res = reinforce_pp_returns(rewards, mask, gamma=gamma, old_logprobs=old, ref_logprobs=ref, kl_coef=kl_coef)
    np.testing.assert_allclose(res.returns * mask, (returns * tm).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(res.advantages, adv.numpy(), rtol=1e-6, atol=1e-6)
