from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses

RNG = np.random.default_rng(1)
LOGITS = jnp.asarray(RNG.normal(0, 2, (2, 4, 7)), jnp.float32)
TARGETS = jnp.asarray(RNG.integers(0, 7, (2, 4)), jnp.int32)
MASK = jnp.array([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])


def _nll():
    logp = jax.nn.log_softmax(np.asarray(LOGITS, np.float64), axis=-1)
    return -np.take_along_axis(np.asarray(logp), np.asarray(TARGETS)[..., None], -1)[..., 0]


def test_token_and_sequence_mean_by_hand():
    nll, m = _nll(), np.asarray(MASK)
    tok, metrics = losses.sft(LOGITS, TARGETS, MASK)
    assert float(tok) == pytest.approx((nll * m).sum() / m.sum(), rel=1e-5)
    seq, _ = jax.jit(partial(losses.sft, reduction="sequence_mean"))(LOGITS, TARGETS, MASK)
    assert float(seq) == pytest.approx(((nll * m).sum(1) / m.sum(1)).mean(), rel=1e-5)
    assert float(metrics["num_tokens"]) == 4


def test_prompt_tokens_do_not_contribute():
    changed = LOGITS.at[:, 0].set(100.0)
    np.testing.assert_allclose(losses.sft(changed, TARGETS, MASK)[0], losses.sft(LOGITS, TARGETS, MASK)[0])


def test_bf16_logits_are_reduced_in_fp32():
    bf = LOGITS.astype(jnp.bfloat16)
    loss, _ = losses.sft(bf, TARGETS, MASK)
    ref, _ = losses.sft(bf.astype(jnp.float32), TARGETS, MASK)
    assert loss.dtype == jnp.float32
    np.testing.assert_allclose(loss, ref, rtol=1e-6)


def test_sequence_weights():
    w = jnp.array([2.0, 0.0])
    loss, _ = losses.sft(LOGITS, TARGETS, MASK, weights=w)
    nll, m = _nll(), np.asarray(MASK)
    assert float(loss) == pytest.approx(2.0 * (nll[0] * m[0]).sum() / m.sum(), rel=1e-5)


def test_errors():
    with pytest.raises(ValueError, match="targets"):
        losses.sft(LOGITS, TARGETS[:, :3], MASK)
    with pytest.raises(ValueError, match="logits must be a 3-D"):
        losses.sft(LOGITS[0], TARGETS, MASK)
    with pytest.raises(ValueError, match="reduction"):
        losses.sft(LOGITS, TARGETS, MASK, reduction="sum")
    with pytest.raises(ValueError, match="weights"):
        losses.sft(LOGITS, TARGETS, MASK, weights=jnp.ones(3))
