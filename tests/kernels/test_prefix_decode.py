"""Shared-prompt decode attention built on the decode kernel (interpret mode on CPU) and on the reference equals
the model's XLA ``prefix_attention``; the decode kernel's heads-first cache and log-sum-exp outputs equal the
reference's."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.kernels import decode_attention, prefix_decode_attention
from rewardsql_jax.kernels.reference import decode_attention_reference
from rewardsql_jax.models.attention_math import prefix_attention

KERNEL = functools.partial(decode_attention, block_k=16, num_splits=2, interpret=True)


def _case(p, g, h, hkv, d, w, c, seed=0):
    rng = np.random.default_rng(seed)
    b = p * g
    q = jnp.asarray(rng.normal(size=(b, 1, h, d)), jnp.float32)
    pk, pv = (jnp.asarray(rng.normal(size=(p, hkv, w, d)), jnp.float32) for _ in range(2))
    k, v = (jnp.asarray(rng.normal(size=(b, hkv, c, d)), jnp.float32) for _ in range(2))
    pmask = jnp.asarray(np.arange(w)[None] >= (np.arange(p)[:, None] * 3) % w)  # left padding 0, 3, 6, ...
    own = jnp.asarray(np.arange(c)[None] <= np.full((b, 1), seed % c))  # slots written so far
    return q, k, v, own, pk, pv, pmask


@pytest.mark.parametrize("decode", [decode_attention_reference, KERNEL], ids=["reference", "pallas_interpret"])
@pytest.mark.parametrize("p,g,h,hkv,w,c", [(2, 3, 4, 2, 37, 20), (1, 8, 6, 1, 50, 16), (3, 1, 2, 2, 9, 33)])
def test_prefix_decode_equals_prefix_attention(decode, p, g, h, hkv, w, c):
    q, k, v, own, pk, pv, pmask = _case(p, g, h, hkv, 16, w, c, seed=p + g)
    want = prefix_attention(q, k, v, own[:, None, :], prefix_k=pk, prefix_v=pv, prefix_mask=pmask)
    got = jax.jit(functools.partial(prefix_decode_attention, decode=decode))(
        q, k, v, own, prefix_k=pk, prefix_v=pv, prefix_mask=pmask
    )
    assert got.shape == q.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_decode_kernel_heads_first_cache_and_lse_equal_the_reference():
    rng = np.random.default_rng(3)
    b, s, h, hkv, d = 3, 45, 4, 2, 16
    q = jnp.asarray(rng.normal(size=(b, h, d)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(b, hkv, s, d)), jnp.float32) for _ in range(2))
    lengths = jnp.array([45, 0, 17])  # row 1 sees no key: zeros and lse -inf
    got, lse = KERNEL(q, k, v, lengths=lengths, kv_heads_first=True, return_lse=True)
    want, want_lse = decode_attention_reference(q, k, v, lengths=lengths, kv_heads_first=True, return_lse=True)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-5)
    assert bool(jnp.all(got[1] == 0.0)) and bool(jnp.all(jnp.isneginf(lse[1])))
    # the lse is the log-sum-exp of the scaled scores of the visible keys
    scores = jnp.einsum("kgd,ksd->kgs", q[0].reshape(hkv, h // hkv, d), k[0]) / jnp.sqrt(jnp.float32(d))
    np.testing.assert_allclose(lse[0], jax.nn.logsumexp(scores, axis=-1).reshape(h), atol=1e-5)
    # the heads-first cache gives what the [B, S, Hkv, D] layout gives
    np.testing.assert_allclose(got, KERNEL(q, k.swapaxes(1, 2), v.swapaxes(1, 2), lengths=lengths), atol=1e-6)
