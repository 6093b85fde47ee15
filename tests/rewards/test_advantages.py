from functools import partial

import jax
import numpy as np
import pytest

from rewardsql_jax.rewards import group_advantages

REWARDS = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.3, 0.7], np.float32)


def test_by_hand_trl_defaults():
    adv = np.asarray(group_advantages(REWARDS[:6], 3))
    std = np.sqrt(1 / 3)  # Bessel std of {1, 0, 0}
    np.testing.assert_allclose(adv[:3], np.array([2 / 3, -1 / 3, -1 / 3]) / (std + 1e-4), rtol=1e-6)
    np.testing.assert_allclose(adv[3:], -adv[:3], rtol=1e-6)


def test_options_ddof_eps_and_dr_grpo():
    r = REWARDS[:4]
    adv0 = np.asarray(group_advantages(r, 4, ddof=0, eps=0.0))
    assert adv0.std() == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(group_advantages(r, 4, scale_std=False), r - r.mean(), rtol=1e-6)


def test_identical_rewards_give_zero_not_nan():
    adv = np.asarray(group_advantages(np.ones(4, np.float32), 2))
    assert np.all(adv == 0.0)


def test_jit_with_static_group_size():
    f = jax.jit(partial(group_advantages, group_size=4))
    np.testing.assert_allclose(f(REWARDS), group_advantages(REWARDS, 4), rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        group_advantages(REWARDS, 3)
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(REWARDS.reshape(2, 4), 4)
    with pytest.raises(ValueError, match="too small"):
        group_advantages(REWARDS, 1)


def test_parity_with_trl_torch_formula():
    torch = pytest.importorskip("torch")
    r = torch.tensor(np.random.default_rng(0).normal(size=24).astype(np.float32))
    g = 8
    mean = r.view(-1, g).mean(dim=1).repeat_interleave(g)
    std = r.view(-1, g).std(dim=1).repeat_interleave(g)
    expected = ((r - mean) / (std + 1e-4)).numpy()
    np.testing.assert_allclose(group_advantages(r.numpy(), g), expected, rtol=1e-6, atol=1e-6)
