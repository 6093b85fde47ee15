"""The SwiGLU gate / up half with the hand-written backward pass (``transformer.swiglu``) equals autodiff of the
plain expression ``silu(x @ w_gate) * (x @ w_up)``: values and all three gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.models.transformer import swiglu


def _plain(x, wg, wu):
    return jax.nn.silu(jnp.dot(x, wg)) * jnp.dot(x, wu)


@pytest.mark.parametrize("lead", [(5,), (2, 7)])
def test_value_and_gradients_equal_autodiff(lead):
    k = jax.random.split(jax.random.key(0), 4)
    d, f = 16, 24
    x = jax.random.normal(k[0], (*lead, d))
    wg, wu = 0.3 * jax.random.normal(k[1], (d, f)), 0.3 * jax.random.normal(k[2], (d, f))
    ct = jax.random.normal(k[3], (*lead, f))  # a non-uniform cotangent

    def objective(fn):
        return jax.jit(jax.value_and_grad(lambda *a: jnp.sum(ct * fn(*a)), argnums=(0, 1, 2)))

    v_plain, g_plain = objective(_plain)(x, wg, wu)
    v_fused, g_fused = objective(swiglu)(x, wg, wu)
    np.testing.assert_allclose(np.asarray(swiglu(x, wg, wu)), np.asarray(_plain(x, wg, wu)), atol=1e-6, rtol=0)
    np.testing.assert_allclose(float(v_fused), float(v_plain), rtol=1e-6)
    for name, a, b in zip(("x", "w_gate", "w_up"), g_plain, g_fused):
        assert b.shape == a.shape and b.dtype == a.dtype, name
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5, err_msg=name)
