"""Pallas flash attention (interpret mode on CPU) against the jnp reference: values and gradients.

Tolerances: fp32 inputs agree with the reference to 1e-5 (abs and rel): the kernel only reorders
fp32 sums (blocked online softmax vs one softmax). bf16 inputs: the kernel multiplies in bf16 with
fp32 accumulation and returns bf16, the reference computes in fp32 from the same bf16 values, so
outputs agree to bf16 resolution (2e-2 abs on O(1) values) and gradients to 2e-2 of their largest
magnitude.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.kernels.dispatch import attention_impl
from rewardsql_jax.kernels.flash_attention import flash_attention, flash_attention_from_mask
from rewardsql_jax.kernels.reference import mha_reference
from rewardsql_jax.models.attention_math import attention as model_attention


def _inputs(b, t, s, h, hkv, d, dtype=jnp.float32, seed=0):
    kq, kk, kv, kw = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(kq, (b, t, h, d), jnp.float32).astype(dtype)
    k = jax.random.normal(kk, (b, s, hkv, d), jnp.float32).astype(dtype)
    v = jax.random.normal(kv, (b, s, hkv, d), jnp.float32).astype(dtype)
    w = jax.random.normal(kw, (b, t, h, d), jnp.float32)
    return q, k, v, w


def _value_and_grads(fn, q, k, v, w):
    """Output and d(sum(out * w))/d(q, k, v), jitted once."""

    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.sum(out.astype(jnp.float32) * w), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return out, grads


LEFT_PAD_MASK = (jnp.arange(50)[None, :] >= jnp.array([0, 13])[:, None]) & (
    jnp.arange(50)[None, :] < jnp.array([41, 50])[:, None]
)

CASES = {
    # name: (T, S, H, Hkv, causal, masking kwargs, block kwargs)
    "mha_odd37_lengths": (37, 37, 2, 2, True, dict(kv_lengths=jnp.array([37, 20])), dict(block_q=16, block_k=16)),
    "mqa_odd50_lengths_own_bwd_blocks": (
        50,
        50,
        4,
        1,
        True,
        dict(kv_lengths=jnp.array([50, 33])),
        dict(block_q=32, block_k=16, block_q_bwd=16, block_k_bwd=32),
    ),
    "gqa_left_padded_mask": (50, 50, 4, 2, True, dict(key_mask=LEFT_PAD_MASK), dict(block_q=16, block_k=32)),
    "gqa_noncausal_cross": (20, 45, 4, 2, False, dict(kv_lengths=jnp.array([45, 7])), dict(block_q=16, block_k=16)),
    # A chunk of 20 queries at positions 25..44 of a 45-slot cache (chunked prefill).
    "gqa_causal_q_offset": (
        20,
        45,
        4,
        2,
        True,
        dict(q_offset=25, kv_lengths=jnp.array([45, 38])),
        dict(block_q=16, block_k=16),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_flash_matches_reference_fp32(name):
    t, s, h, hkv, causal, pad, blocks = CASES[name]
    q, k, v, w = _inputs(2, t, s, h, hkv, 16)
    kernel = functools.partial(flash_attention, causal=causal, interpret=True, **blocks, **pad)
    ref = functools.partial(mha_reference, causal=causal, **pad)
    out, grads = _value_and_grads(kernel, q, k, v, w)
    ref_out, ref_grads = _value_and_grads(ref, q, k, v, w)
    np.testing.assert_allclose(out, ref_out, atol=1e-5, rtol=1e-5)
    for got, want, label in zip(grads, ref_grads, ("dq", "dk", "dv")):
        assert float(jnp.max(jnp.abs(want))) > 0.1, label  # the gradient is not trivially zero
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=label)


def test_flash_matches_reference_bf16():
    q, k, v, w = _inputs(2, 37, 37, 4, 2, 32, dtype=jnp.bfloat16, seed=3)
    lengths = jnp.array([30, 37])
    kernel = functools.partial(flash_attention, kv_lengths=lengths, block_q=16, block_k=16, interpret=True)
    out, grads = _value_and_grads(kernel, q, k, v, w)
    assert out.dtype == jnp.bfloat16 and all(g.dtype == jnp.bfloat16 for g in grads)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    ref = functools.partial(mha_reference, kv_lengths=lengths)
    ref_out, ref_grads = _value_and_grads(ref, *f32, w)
    np.testing.assert_allclose(out.astype(jnp.float32), ref_out, atol=2e-2)
    for got, want in zip(grads, ref_grads):
        scale = float(jnp.max(jnp.abs(want)))
        np.testing.assert_allclose(got.astype(jnp.float32), want, atol=2e-2 * scale)


def test_reference_equals_model_attention_on_causal_padding_mask():
    """Reference == attention_math.attention on rows with a visible key; zeros (not an average) elsewhere."""
    q, k, v, _ = _inputs(2, 50, 50, 4, 2, 16, seed=5)
    mask = jnp.tril(jnp.ones((50, 50), bool))[None] & LEFT_PAD_MASK[:, None, :]
    want = model_attention(q, k, v, mask)
    got = mha_reference(q, k, v, causal=True, key_mask=LEFT_PAD_MASK)
    has_key = jnp.any(mask, axis=-1)  # [B, T]
    assert not bool(jnp.all(has_key))  # the left-padded row has query rows that see nothing
    np.testing.assert_allclose(got[has_key], want[has_key], atol=1e-6, rtol=1e-6)
    assert bool(jnp.all(got[~has_key] == 0.0))


def test_flash_from_mask_is_drop_in_for_model_attention():
    q, k, v, _ = _inputs(2, 50, 50, 4, 2, 16, seed=6)
    mask = jnp.tril(jnp.ones((50, 50), bool))[None] & LEFT_PAD_MASK[:, None, :]
    has_key = jnp.any(mask, axis=-1)
    got = jax.jit(functools.partial(flash_attention_from_mask, block_q=16, block_k=16, interpret=True))(q, k, v, mask)
    np.testing.assert_allclose(got[has_key], model_attention(q, k, v, mask)[has_key], atol=1e-5, rtol=1e-5)
    assert bool(jnp.all(got[~has_key] == 0.0))


def test_dispatch_picks_reference_on_cpu_and_interpret_on_request():
    impl = attention_impl("cpu")
    assert impl.name == "reference" and impl.flash is mha_reference
    assert attention_impl("tpu").name == "pallas_tpu" and attention_impl("cuda").name == "pallas_gpu"
    interp = attention_impl(interpret=True, block_q=16, block_k=16)
    assert interp.name == "pallas_interpret"
    q, k, v, _ = _inputs(1, 20, 20, 2, 1, 16, seed=7)
    mask = jnp.tril(jnp.ones((20, 20), bool))[None]
    np.testing.assert_allclose(jax.jit(interp.from_mask)(q, k, v, mask), impl.from_mask(q, k, v, mask), atol=1e-5)


def test_invalid_arguments_raise():
    q, k, v, _ = _inputs(1, 20, 24, 3, 2, 16)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention(q, k, v, causal=False, interpret=True)
    with pytest.raises(ValueError, match="q_offset"):
        flash_attention(q[:, :, :2], k, v, causal=True, q_offset=-1, interpret=True)
