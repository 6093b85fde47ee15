"""The sampler's attention paths equal plain attention: shared-prefix decode attention and the one-query path over
each row's full cache, and the prefill's query-chunked causal attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.models.attention_math import attention, causal_attention_in_query_chunks, prefix_attention


def heads_first(x):
    return x.transpose(0, 2, 1, 3)


def _einsum_attention(q, k, v, mask):
    """The general path of ``attention`` (T > 1 branch) for any T: the reference here."""
    b, t, h, d = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, t, hkv, h // hkv, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k) / jnp.sqrt(jnp.float32(d))
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bkgts,bskd->btkgd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, h, d)


@pytest.mark.parametrize("h,hkv", [(4, 2), (4, 4), (6, 1)])
def test_single_query_attention_matches_the_matmul_path(h, hkv):
    rng = np.random.default_rng(0)
    b, s, d = 3, 11, 8
    q = jnp.asarray(rng.normal(size=(b, 1, h, d)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(b, s, hkv, d)), jnp.float32) for _ in range(2))
    mask = jnp.asarray(rng.random((b, 1, s)) < 0.7).at[:, :, 0].set(True)
    np.testing.assert_allclose(attention(q, k, v, mask), _einsum_attention(q, k, v, mask), atol=1e-5, rtol=0)


@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("h,hkv", [(4, 2), (2, 2)])
def test_prefix_attention_equals_attention_over_prompt_plus_own_cache(t, h, hkv):
    rng = np.random.default_rng(1)
    p, g, w, s, d = 2, 3, 7, 5, 8
    b = p * g
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)
    pk, pv = (jnp.asarray(rng.normal(size=(p, w, hkv, d)), jnp.float32) for _ in range(2))
    k, v = (jnp.asarray(rng.normal(size=(b, s, hkv, d)), jnp.float32) for _ in range(2))
    prefix_mask = jnp.asarray(np.arange(w)[None, :] >= np.array([[2], [0]]))  # left padding of 2 and 0
    own = jnp.asarray(np.arange(s)[None, None, :] <= np.arange(t)[None, :, None] + 1).repeat(b, axis=0)

    got = prefix_attention(
        q,
        heads_first(k),
        heads_first(v),
        own,
        prefix_k=heads_first(pk),
        prefix_v=heads_first(pv),
        prefix_mask=prefix_mask,
    )
    full_k = jnp.concatenate([jnp.repeat(pk, g, axis=0), k], axis=1)
    full_v = jnp.concatenate([jnp.repeat(pv, g, axis=0), v], axis=1)
    full_mask = jnp.concatenate([jnp.repeat(prefix_mask, g, axis=0)[:, None, :].repeat(t, axis=1), own], axis=2)
    np.testing.assert_allclose(got, _einsum_attention(q, full_k, full_v, full_mask), atol=1e-5, rtol=0)


@pytest.mark.parametrize("t,chunk,max_chunks", [(13, 4, 8), (16, 16, 8), (9, 64, 8), (13, 2, 3)])
@pytest.mark.parametrize("h,hkv", [(4, 2), (3, 1)])
def test_causal_attention_in_query_chunks_equals_masked_attention(t, chunk, max_chunks, h, hkv):
    rng = np.random.default_rng(2)
    b, d = 3, 8
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(b, t, hkv, d)), jnp.float32) for _ in range(2))
    key_mask = jnp.asarray(np.arange(t)[None, :] >= np.array([[0], [3], [t - 1]]))  # left padding 0, 3, t - 1
    mask = jnp.tril(jnp.ones((t, t), bool))[None] & key_mask[:, None, :]
    real = np.asarray(key_mask)  # padded query rows are not compared (both give a harmless average there)
    got = causal_attention_in_query_chunks(q, k, v, key_mask, chunk=chunk, max_chunks=max_chunks)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(attention(q, k, v, mask))[real], atol=1e-5, rtol=0)

    def loss(fn, q, k, v):
        return jnp.sum(jnp.where(key_mask[:, :, None, None], fn(q, k, v), 0.0) ** 2)

    def chunked(q, k, v):
        return causal_attention_in_query_chunks(q, k, v, key_mask, chunk=chunk, max_chunks=max_chunks)

    grads = jax.grad(lambda *a: loss(chunked, *a), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(lambda *a: loss(lambda q, k, v: attention(q, k, v, mask), *a), argnums=(0, 1, 2))(q, k, v)
    for g_got, g_want in zip(grads, want):
        np.testing.assert_allclose(g_got, g_want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("t", [1, 3])
def test_prefix_attention_with_a_common_block_equals_attention_over_all_three(t):
    """common_k/common_v (what every prompt starts with, stored once) + each prompt's cache + each row's own."""
    rng = np.random.default_rng(2)
    p, g, c, w, s, h, hkv, d = 2, 3, 6, 7, 5, 4, 2, 8
    b = p * g
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.float32)
    ck, cv = (jnp.asarray(rng.normal(size=(1, c, hkv, d)), jnp.float32) for _ in range(2))
    pk, pv = (jnp.asarray(rng.normal(size=(p, w, hkv, d)), jnp.float32) for _ in range(2))
    k, v = (jnp.asarray(rng.normal(size=(b, s, hkv, d)), jnp.float32) for _ in range(2))
    prefix_mask = jnp.asarray(np.arange(w)[None, :] >= np.array([[3], [1]]))
    own = jnp.asarray(np.arange(s)[None, None, :] <= np.arange(t)[None, :, None] + 1).repeat(b, axis=0)

    got = prefix_attention(
        q,
        heads_first(k),
        heads_first(v),
        own,
        prefix_k=heads_first(pk),
        prefix_v=heads_first(pv),
        prefix_mask=prefix_mask,
        common_k=heads_first(ck),
        common_v=heads_first(cv),
    )
    full_k = jnp.concatenate([jnp.repeat(ck, b, axis=0), jnp.repeat(pk, g, axis=0), k], axis=1)
    full_v = jnp.concatenate([jnp.repeat(cv, b, axis=0), jnp.repeat(pv, g, axis=0), v], axis=1)
    prompt_mask = jnp.concatenate([jnp.ones((p, c), bool), prefix_mask], axis=1)
    full_mask = jnp.concatenate([jnp.repeat(prompt_mask, g, axis=0)[:, None, :].repeat(t, axis=1), own], axis=2)
    np.testing.assert_allclose(got, _einsum_attention(q, full_k, full_v, full_mask), atol=1e-5, rtol=0)
