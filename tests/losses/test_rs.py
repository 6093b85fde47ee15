from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses

RNG = np.random.default_rng(2)
LOGITS = jnp.asarray(RNG.normal(0, 2, (3, 4, 5)), jnp.float32)
TARGETS = jnp.asarray(RNG.integers(0, 5, (3, 4)), jnp.int32)
MASK = jnp.array([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])


def test_equals_sft_on_the_kept_candidates():
    rewards = jnp.array([1.5, 0.5, 1.0])  # threshold 1.0 is strict (R_i > tau): keeps only row 0
    loss, m = jax.jit(partial(losses.rs, threshold=1.0))(LOGITS, TARGETS, MASK, rewards)
    ref, _ = losses.sft(LOGITS[:1], TARGETS[:1], MASK[:1])
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    assert float(m["kept_fraction"]) == pytest.approx(1 / 3)
    g = jax.grad(lambda x: losses.rs(x, TARGETS, MASK, rewards, threshold=1.0)[0])(LOGITS)
    assert float(jnp.abs(g[1:]).max()) == 0.0 and float(jnp.abs(g[0]).max()) > 0.0


def test_nothing_kept_gives_zero_loss():
    loss, m = losses.rs(LOGITS, TARGETS, MASK, jnp.zeros(3), threshold=0.5)
    assert float(loss) == 0.0 and float(m["kept_fraction"]) == 0.0


def test_reward_shape_error():
    with pytest.raises(ValueError, match="rewards"):
        losses.rs(LOGITS, TARGETS, MASK, jnp.zeros(2))
