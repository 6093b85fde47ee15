from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses

C = jnp.array([-10.0, -12.0, -8.0])
R = jnp.array([-11.0, -11.0, -9.0])
RC = jnp.array([-10.5, -12.0, -8.5])
RR = jnp.array([-10.5, -11.5, -9.5])


def test_equal_policy_and_reference_gives_log2():
    loss, m = losses.dpo(C, R, C, R, beta=0.3)
    assert float(loss) == pytest.approx(np.log(2.0), rel=1e-6)
    assert float(m["rewards/margins"]) == 0.0


def test_value_and_metrics_by_hand():
    beta = 0.5
    loss, m = jax.jit(partial(losses.dpo, beta=beta))(C, R, RC, RR)
    logits = np.array((C - R) - (RC - RR))
    expected = np.mean(np.log1p(np.exp(-beta * logits)))
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    cr, rr = beta * np.array(C - RC), beta * np.array(R - RR)
    assert float(m["rewards/chosen"]) == pytest.approx(cr.mean(), rel=1e-6)
    assert float(m["rewards/rejected"]) == pytest.approx(rr.mean(), rel=1e-6)
    assert float(m["rewards/accuracies"]) == pytest.approx(np.mean(cr > rr))
    assert float(m["rewards/margins"]) == pytest.approx((cr - rr).mean(), rel=1e-6)


def test_gradient_raises_chosen_and_lowers_rejected():
    g_c, g_r = jax.grad(lambda c, r: losses.dpo(c, r, RC, RR)[0], argnums=(0, 1))(C, R)
    assert (np.asarray(g_c) < 0).all() and (np.asarray(g_r) > 0).all()
    np.testing.assert_allclose(g_c, -g_r, rtol=1e-6)


def test_label_smoothing_mixes_both_directions():
    ls = 0.2
    loss, _ = losses.dpo(C, R, RC, RR, beta=0.1, label_smoothing=ls)
    z = 0.1 * np.array((C - R) - (RC - RR))
    expected = np.mean((1 - ls) * np.log1p(np.exp(-z)) + ls * np.log1p(np.exp(z)))
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_shape_errors():
    with pytest.raises(ValueError, match="ref_rejected_logps"):
        losses.dpo(C, R, RC, RR[:2])
    with pytest.raises(ValueError, match="chosen_logps must be a 1-D"):
        losses.dpo(C[None], R[None], RC[None], RR[None])
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.dpo(C, R, RC, RR, label_smoothing=0.7)
