from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses

B, T = 3, 5
RNG = np.random.default_rng(0)
LOGP = jnp.asarray(-np.abs(RNG.normal(1.0, 0.5, (B, T))), jnp.float32)
OLD = LOGP + jnp.asarray(RNG.normal(0.0, 0.2, (B, T)), jnp.float32)
REF = LOGP + jnp.asarray(RNG.normal(0.0, 0.2, (B, T)), jnp.float32)
MASK = jnp.asarray([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], jnp.float32)
ADV = jnp.asarray([1.0, -0.5, 2.0], jnp.float32)


def test_on_policy_gradient_is_advantage_weighted_mean():
    """ratio 1 (old = stop_gradient(logp)): d loss / d logp_bt = -A_b m_bt / (n_b * B) for agg="grpo"."""
    grad = jax.grad(lambda lp: losses.grpo(lp, None, ADV, MASK)[0])(LOGP)
    n = MASK.sum(1, keepdims=True)
    np.testing.assert_allclose(grad, -ADV[:, None] * MASK / n / B, rtol=1e-6)
    loss, _ = losses.grpo(LOGP, None, ADV, MASK)
    assert float(loss) == pytest.approx(-float(ADV.mean()), rel=1e-6)


def test_sequence_advantages_broadcast_like_per_token():
    a = losses.grpo(LOGP, OLD, ADV, MASK, ref_logprobs=REF, beta=0.1)
    b = losses.grpo(LOGP, OLD, jnp.broadcast_to(ADV[:, None], (B, T)), MASK, ref_logprobs=REF, beta=0.1)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-7)


def test_per_token_advantages_change_the_loss_per_token():
    adv_t = jnp.zeros((B, T)).at[0, 0].set(3.0)
    grad = jax.grad(lambda lp: losses.grpo(lp, None, adv_t, MASK, agg="bnpo")[0])(LOGP)
    expected = np.zeros((B, T))
    expected[0, 0] = -3.0 / float(MASK.sum())
    np.testing.assert_allclose(grad, expected, atol=1e-7)


def test_clip_eps_high_widens_the_upper_clip():
    old = LOGP - jnp.log(1.25)  # ratio 1.25 everywhere
    adv = jnp.ones((B,))
    g_sym = jax.grad(lambda lp: losses.grpo(lp, old, adv, MASK)[0])(LOGP)
    g_high = jax.grad(lambda lp: losses.grpo(lp, old, adv, MASK, clip_eps_high=0.28)[0])(LOGP)
    assert float(jnp.abs(g_sym).max()) == 0.0  # clipped at 1.2: no gradient
    assert float(jnp.abs(g_high).min(where=MASK > 0, initial=1.0)) > 0.0
    _, m = losses.grpo(LOGP, old, adv, MASK)
    assert float(m["clip_ratio/high"]) == 1.0 and float(m["clip_ratio/low"]) == 0.0


def test_kl_term_adds_beta_times_masked_kl():
    base, _ = losses.grpo(LOGP, OLD, ADV, MASK, agg="bnpo")
    with_kl, m = losses.grpo(LOGP, OLD, ADV, MASK, agg="bnpo", ref_logprobs=REF, beta=0.5)
    # compare totals, not the difference: subtracting two O(1) fp32 losses cancels digits
    assert float(with_kl) == pytest.approx(float(base) + 0.5 * float(m["kl"]), rel=1e-6)
    k3 = jnp.exp(REF - LOGP) - (REF - LOGP) - 1
    assert float(m["kl"]) == pytest.approx(float((k3 * MASK).sum() / MASK.sum()), rel=1e-6)


def test_entropy_bonus_is_subtracted():
    ent = jnp.full((B, T), 2.0)
    base, _ = losses.grpo(LOGP, OLD, ADV, MASK, agg="bnpo")
    bonus, m = losses.grpo(LOGP, OLD, ADV, MASK, agg="bnpo", entropy=ent, entropy_coef=0.01)
    assert float(bonus) == pytest.approx(float(base) - 0.02, rel=1e-6)
    assert float(m["entropy"]) == pytest.approx(2.0)


def test_jit_with_static_options_and_bf16_inputs():
    fn = jax.jit(partial(losses.grpo, agg="dr_grpo", kl="k2", beta=0.04, max_len=8))
    loss, _ = fn(LOGP, OLD, ADV, MASK, ref_logprobs=REF)
    eager, _ = losses.grpo(LOGP, OLD, ADV, MASK, ref_logprobs=REF, agg="dr_grpo", kl="k2", beta=0.04, max_len=8)
    np.testing.assert_allclose(loss, eager, rtol=1e-6)
    loss_bf16, _ = losses.grpo(LOGP.astype(jnp.bfloat16), OLD.astype(jnp.bfloat16), ADV, MASK)
    assert loss_bf16.dtype == jnp.float32


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="old_logprobs"):
        losses.grpo(LOGP, OLD[:, :4], ADV, MASK)
    with pytest.raises(ValueError, match="mask"):
        losses.grpo(LOGP, OLD, ADV, MASK[:2])
    with pytest.raises(ValueError, match="advantages"):
        losses.grpo(LOGP, OLD, jnp.ones((B + 1,)), MASK)
    with pytest.raises(ValueError, match="logprobs must be a 2-D"):
        losses.grpo(LOGP[0], OLD[0], ADV, MASK[0])
    with pytest.raises(ValueError, match="ref_logprobs"):
        losses.grpo(LOGP, OLD, ADV, MASK, beta=0.1)
    with pytest.raises(ValueError, match="agg="):
        losses.grpo(LOGP, OLD, ADV, MASK, agg="mean")
    with pytest.raises(ValueError, match="kl="):
        losses.grpo(LOGP, OLD, ADV, MASK, ref_logprobs=REF, beta=0.1, kl="k5")
    with pytest.raises(ValueError, match="entropy"):
        losses.grpo(LOGP, OLD, ADV, MASK, entropy_coef=0.1)


def test_old_and_ref_logprobs_are_constants():
    """Passing the current log-probs as old_logprobs is the on-policy case (ratio 1), as in TRL."""
    g_none = jax.grad(lambda lp: losses.grpo(lp, None, ADV, MASK)[0])(LOGP)
    g_same = jax.grad(lambda lp: losses.grpo(lp, lp, ADV, MASK)[0])(LOGP)
    np.testing.assert_allclose(g_same, g_none, rtol=1e-6)
    g_ref = jax.grad(lambda r: losses.grpo(LOGP, OLD, ADV, MASK, ref_logprobs=r, beta=0.1)[0])(REF)
    assert float(jnp.abs(g_ref).max()) == 0.0
