import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.losses import kl_estimate

LOGP = jnp.array([-1.0, -2.0, -0.5, -3.0])
REF = jnp.array([-1.0, -1.5, -1.5, -0.5])


def test_estimator_formulas():
    d = np.array(LOGP - REF)
    np.testing.assert_allclose(kl_estimate(LOGP, REF, "k1"), d, rtol=1e-6)
    np.testing.assert_allclose(kl_estimate(LOGP, REF, "k2"), 0.5 * d**2, rtol=1e-6)
    np.testing.assert_allclose(kl_estimate(LOGP, REF, "k3"), np.exp(-d) + d - 1, rtol=1e-6)


def test_k3_is_nonnegative_and_zero_at_equality():
    k3 = np.asarray(kl_estimate(LOGP, REF, "k3"))
    assert (k3 >= 0).all()
    assert k3[0] == 0.0 and (k3[1:] > 0).all()


def test_clamps():
    clamped = np.asarray(kl_estimate(LOGP, REF, "k3", clamp=0.5))
    assert clamped.max() == pytest.approx(0.5)
    # log-ratio clamp applies before the estimator: k1 with |d| <= 1
    np.testing.assert_allclose(kl_estimate(LOGP, REF, "k1", log_ratio_clamp=1.0), [0.0, -0.5, 1.0, -1.0])


def test_unknown_estimator():
    with pytest.raises(ValueError, match="k1"):
        kl_estimate(LOGP, REF, "k4")
