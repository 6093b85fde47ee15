"""Pallas decode attention (flash-decoding, interpret mode on CPU) against the jnp reference.

Tolerances: fp32 agrees to 1e-5 (only the order of fp32 sums differs: per-split online softmax then
a rescaled merge); bf16 inputs (bf16 matmuls, fp32 accumulation, bf16 output) to 2e-2 abs on O(1)
values against the fp32 reference on the same bf16 values.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.kernels.decode_attention import combine_splits, decode_attention
from rewardsql_jax.kernels.reference import decode_attention_reference
from rewardsql_jax.models.attention_math import attention as model_attention


def _cache(b, s, h, hkv, d, dtype=jnp.float32, seed=0):
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.random.normal(kq, (b, h, d), jnp.float32).astype(dtype)
    k = jax.random.normal(kk, (b, s, hkv, d), jnp.float32).astype(dtype)
    v = jax.random.normal(kv, (b, s, hkv, d), jnp.float32).astype(dtype)
    return q, k, v


CASES = {
    # name: (S_max, H, Hkv, lengths, block_k, num_splits)
    "mha_full_and_single_slot": (50, 2, 2, [50, 1, 23], 16, 2),
    "mqa_odd37_one_split": (37, 4, 1, [37, 36, 5], 16, 1),
    "gqa_many_splits": (64, 4, 2, [17, 64, 33], 16, 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_decode_matches_reference_lengths(name):
    s, h, hkv, lengths, bk, splits = CASES[name]
    q, k, v = _cache(3, s, h, hkv, 16)
    lengths = jnp.array(lengths)
    fn = functools.partial(decode_attention, block_k=bk, num_splits=splits, interpret=True)
    got = jax.jit(fn)(q, k, v, lengths=lengths)
    want = decode_attention_reference(q, k, v, lengths=lengths)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_decode_with_left_padded_key_mask_matches_model_attention():
    """The sampler's slot mask (left padding, then prompt and generated slots) as in forward_with_cache."""
    s = 50
    q, k, v = _cache(3, s, 4, 2, 16, seed=1)
    slots = jnp.arange(s)[None, :]
    key_mask = (slots >= jnp.array([5, 0, 40])[:, None]) & (slots < jnp.array([30, 50, 45])[:, None])
    fn = functools.partial(decode_attention, block_k=16, num_splits=3, interpret=True)
    got = jax.jit(fn)(q[:, None], k, v, key_mask=key_mask)
    assert got.shape == (3, 1, 4, 16)
    want = model_attention(q[:, None], k, v, key_mask[:, None, :])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got, decode_attention_reference(q[:, None], k, v, key_mask=key_mask), atol=1e-5)


def test_decode_bf16():
    q, k, v = _cache(2, 40, 4, 2, 32, dtype=jnp.bfloat16, seed=2)
    lengths = jnp.array([40, 19])
    got = jax.jit(functools.partial(decode_attention, block_k=16, num_splits=2, interpret=True))(
        q, k, v, lengths=lengths
    )
    assert got.dtype == jnp.bfloat16
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    np.testing.assert_allclose(got.astype(jnp.float32), decode_attention_reference(*f32, lengths=lengths), atol=2e-2)


def test_decode_zero_length_gives_zeros():
    q, k, v = _cache(2, 32, 2, 1, 16, seed=3)
    got = jax.jit(functools.partial(decode_attention, block_k=16, num_splits=2, interpret=True))(
        q, k, v, lengths=jnp.array([0, 32])
    )
    assert bool(jnp.all(got[0] == 0.0))
    np.testing.assert_allclose(got[1], decode_attention_reference(q, k, v)[1], atol=1e-5)


def test_combine_splits_equals_softmax_over_concatenation():
    """Merging per-split (acc, m, l) partials is exact: split scores [1, 2] | [3] | (empty)."""
    v = jnp.array([[1.0], [2.0], [4.0]])
    s = jnp.array([1.0, 2.0, 3.0])
    parts = [(0, 2), (2, 3)]
    acc, m, l = [], [], []
    for lo, hi in parts:
        mi = jnp.max(s[lo:hi])
        p = jnp.exp(s[lo:hi] - mi)
        acc.append(p @ v[lo:hi])
        m.append(mi)
        l.append(jnp.sum(p))
    acc.append(jnp.zeros(1))
    m.append(jnp.float32(-1e30))
    l.append(jnp.float32(0.0))
    got = combine_splits(jnp.stack(acc)[:, None, :], jnp.stack(m)[:, None, None], jnp.stack(l)[:, None, None])
    np.testing.assert_allclose(got[0], jax.nn.softmax(s) @ v, rtol=1e-6)
