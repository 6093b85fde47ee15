"""Learning-rate schedules and the AdamW weight-decay mask."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer, make_schedule


def test_constant_with_warmup():
    lr = make_schedule(OptimizerConfig(learning_rate=1e-3, warmup_steps=4))
    assert [float(lr(s)) for s in (0, 2, 4, 100)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])


def test_cosine_after_warmup_reaches_min_lr():
    cfg = OptimizerConfig(learning_rate=1e-3, schedule="cosine", warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    lr = make_schedule(cfg)
    end = 1e-4
    mid = end + 0.5 * (1e-3 - end) * (1 + math.cos(math.pi * 0.5))
    assert [float(lr(s)) for s in (5, 10, 60, 110)] == pytest.approx([5e-4, 1e-3, mid, end], rel=1e-5)


def test_linear_decay_like_hf():
    lr = make_schedule(OptimizerConfig(learning_rate=2e-3, schedule="linear", warmup_steps=2, total_steps=12))
    assert [float(lr(s)) for s in (1, 2, 7, 12)] == pytest.approx([1e-3, 2e-3, 1e-3, 0.0], abs=1e-9)


def test_weight_decay_skips_biases_and_norms_by_default():
    params = {"kernel": jnp.ones((2, 3)), "bias": jnp.ones((3,))}
    zero = jax.tree.map(jnp.zeros_like, params)
    for decay_all, bias_after in ((False, 1.0), (True, 1.0 - 0.1 * 0.5)):
        tx = make_optimizer(OptimizerConfig(learning_rate=0.1, weight_decay=0.5, decay_bias_and_norm=decay_all))
        updates, _ = tx.update(zero, tx.init(params), params)
        np.testing.assert_allclose(np.asarray(params["kernel"] + updates["kernel"]), 0.95, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(params["bias"] + updates["bias"]), bias_after, rtol=1e-6)


def test_gradients_are_clipped_by_global_norm():
    params = {"w": jnp.zeros((2,))}
    g = {"w": jnp.array([30.0, 40.0])}  # global norm 50
    for max_norm, want in ((1.0, [0.6, 0.8]), (100.0, [30.0, 40.0]), (None, [30.0, 40.0])):
        tx = make_optimizer(OptimizerConfig(learning_rate=1.0, max_grad_norm=max_norm, b1=0.0))
        _, state = tx.update(g, tx.init(params), params)
        adam = state[1][0] if max_norm is not None else state[0]  # b1=0: Adam's first moment is the gradient it saw
        np.testing.assert_allclose(np.asarray(adam.mu["w"]), want, rtol=1e-6)
