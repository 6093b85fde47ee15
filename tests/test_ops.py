"""``rewardsql_jax.ops`` equals the jnp ops it replaces."""

import jax.numpy as jnp
import numpy as np

from rewardsql_jax.ops import first_argmax


def test_first_argmax_equals_jnp_argmax_with_ties_and_inf():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (64, 37)).astype(np.float32)  # many ties: the first maximum wins
    x[3] = -np.inf
    x[3, 20] = 1.0
    x[5, :] = -np.inf  # all -inf: index 0, as jnp.argmax
    np.testing.assert_array_equal(np.asarray(first_argmax(jnp.asarray(x))), np.asarray(jnp.argmax(jnp.asarray(x), -1)))
    y = rng.normal(size=(2, 3, 11)).astype(np.float32)  # leading batch dims
    np.testing.assert_array_equal(np.asarray(first_argmax(jnp.asarray(y))), y.argmax(-1))
