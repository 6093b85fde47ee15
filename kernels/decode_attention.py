"""Decode attention over a KV cache in Pallas (flash-decoding, Dao et al. 2023).

One query token per sequence attends to the first ``length`` slots of a ``[B, S_max, Hkv, D]`` cache.
A single query leaves little parallelism per (batch, head), so the cache is split along the sequence
into ``num_splits`` chunks processed by separate programs; each returns an unnormalised partial
(running max ``m``, sum ``l``, accumulator ``acc``) of the online softmax, and a cheap jnp reduction
rescales and merges the partials. Programs skip the KV blocks at or after the sequence length, so
the work follows the real lengths rather than ``S_max`` (on GPU the loads too; on TPU the BlockSpec
pipeline still copies each split's block into VMEM, so there the skip saves compute only).

GQA: one program serves all ``H // Hkv`` query heads that share a KV head, so each K/V block is
read once per group (padded to at least 8/16 rows, the smallest matmul tile). The cache is read in
its model layout, viewed as ``[B, S, Hkv * D]`` (a free reshape) with one ``D``-wide column block per
KV head; Mosaic (TPU) needs that block 128-lane aligned, so for ``D % 128 != 0`` on TPU the cache
is transposed to ``[B, Hkv, S, D]`` first (an extra copy per call).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from ._pallas_common import (
    MASK_VALUE,
    call_kwargs,
    key_mask_of,
    kv_block_size,
    pad_axis,
    read_scalar,
    resolve_backend,
    scalar_spec,
)


def _decode_kernel(len_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_ref, l_ref, *, scale, block_k, backend):
    split_len = k_ref.shape[0]
    split_start = pl.program_id(2) * split_len
    length = read_scalar(len_ref, backend, pl.program_id(0))
    num_blocks = jnp.clip(pl.cdiv(length - split_start, block_k), 0, split_len // block_k)
    q = q_ref[...]
    rows = q.shape[0]

    def body(j, carry):
        m, l, acc = carry
        start = pl.multiple_of(j * block_k, block_k)
        k = k_ref[pl.ds(start, block_k), :]
        v = v_ref[pl.ds(start, block_k), :]
        # The mask already encodes the lengths; ``length`` only bounds the loop.
        visible = jnp.broadcast_to(mask_ref[:, pl.ds(start, block_k)] != 0, (rows, block_k))
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
        s = jnp.where(visible, s, MASK_VALUE)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        p = jnp.where(visible, jnp.exp(s - m_new), 0.0)
        alpha = jnp.exp(m - m_new)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return m_new, l * alpha + jnp.sum(p, axis=1, keepdims=True), acc * alpha + pv

    init = (
        jnp.full((rows, 1), MASK_VALUE, jnp.float32),
        jnp.zeros((rows, 1), jnp.float32),
        jnp.zeros((rows, q.shape[1]), jnp.float32),
    )
    m, l, acc = jax.lax.fori_loop(0, num_blocks, body, init)
    o_ref[...] = acc
    m_ref[...] = m
    l_ref[...] = l


def combine_splits(acc, m, l, *, with_lse: bool = False):
    """Merge flash-decoding partials ``acc [..., n, G, D]``, ``m, l [..., n, G, 1]`` over splits ``n``.

    Rows with no visible key anywhere (``sum l == 0``) give zeros. ``with_lse`` also returns each row's
    log-sum-exp of the scaled scores ``[..., G, 1]`` (``-inf`` for such rows), what merging this attention
    with one over other keys needs (``prefix_decode``).
    """
    m_max = jnp.max(m, axis=-3, keepdims=True)
    w = jnp.exp(m - m_max)
    denom = jnp.sum(w * l, axis=-3)
    num = jnp.sum(w * acc, axis=-3)
    out = num / jnp.where(denom == 0.0, 1.0, denom)
    if not with_lse:
        return out
    lse = jnp.where(denom == 0.0, -jnp.inf, jnp.squeeze(m_max, -3) + jnp.log(jnp.where(denom == 0.0, 1.0, denom)))
    return out, lse


def decode_attention(
    q,
    k_cache,
    v_cache,
    *,
    lengths=None,
    key_mask=None,
    scale: float | None = None,
    block_k: int = 128,
    num_splits: int = 4,
    backend: str | None = None,
    interpret: bool = False,
    kv_heads_first: bool = False,
    return_lse: bool = False,
):
    """Attention of one query token per sequence over a KV cache (same semantics as
    ``reference.decode_attention_reference``).

    q ``[B, H, D]`` or ``[B, 1, H, D]``; caches ``[B, S_max, Hkv, D]`` (``[B, Hkv, S_max, D]`` with
    ``kv_heads_first``, the sampler's layout, read in place); ``lengths [B]`` (slots ``< length`` valid)
    and/or ``key_mask [B, S_max]`` (e.g. the sampler's left-padded slot mask). With only a key mask, the
    loop bound is the last valid slot + 1. Caches whose ``S_max`` is not a multiple of ``num_splits *
    block_k`` (after clipping) are padded, which copies them: size the cache accordingly for speed.
    ``return_lse``: also return the per-head log-sum-exp of the scaled scores, ``[B, H]`` (``-inf`` where
    no key is visible).
    """
    squeeze = q.ndim == 3
    q3 = q if squeeze else q[:, 0]
    if not squeeze and q.shape[1] != 1:
        raise ValueError(f"decode attention takes one query token per sequence, got {q.shape[1]}")
    b, h, d = q3.shape
    slot_axis = 2 if kv_heads_first else 1
    s, hkv = k_cache.shape[slot_axis], k_cache.shape[3 - slot_axis]
    if h % hkv:
        raise ValueError(f"num heads {h} is not a multiple of num kv heads {hkv}")
    backend = resolve_backend(backend, interpret)
    scale = float(d**-0.5 if scale is None else scale)
    mask = key_mask_of(b, s, lengths, key_mask)
    if lengths is None:
        lengths = jnp.max(jnp.where(mask, jnp.arange(1, s + 1)[None, :], 0), axis=1)
    lengths = jnp.minimum(jnp.asarray(lengths, jnp.int32), s)

    block_k = kv_block_size(block_k, s, backend)
    num_splits = max(1, min(num_splits, pl.cdiv(s, block_k)))
    split_len = pl.cdiv(pl.cdiv(s, block_k), num_splits) * block_k
    k_cache = pad_axis(k_cache, slot_axis, split_len)
    v_cache = pad_axis(v_cache, slot_axis, split_len)
    mask = pad_axis(mask.astype(jnp.int32), 1, split_len)[:, None, :]
    sp = k_cache.shape[slot_axis]
    num_splits = sp // split_len

    groups = h // hkv
    rows = max(16 if backend == "gpu" else 8, pl.next_power_of_2(groups))
    qg = pad_axis(q3.reshape(b, hkv, groups, d), 2, rows)

    grid = (b, hkv, num_splits)
    if kv_heads_first or (backend == "tpu" and d % 128):
        if not kv_heads_first:
            k_cache, v_cache = (x.transpose(0, 2, 1, 3) for x in (k_cache, v_cache))
        kv_spec = pl.BlockSpec((None, None, split_len, d), lambda bi, hi, si: (bi, hi, si, 0))
    else:
        k_cache, v_cache = (x.reshape(b, sp, hkv * d) for x in (k_cache, v_cache))
        kv_spec = pl.BlockSpec((None, split_len, d), lambda bi, hi, si: (bi, si, hi))
    row_spec = pl.BlockSpec((None, None, None, rows, 1), lambda bi, hi, si: (bi, hi, si, 0, 0))
    acc, m, l = pl.pallas_call(
        functools.partial(_decode_kernel, scale=scale, block_k=block_k, backend=backend),
        grid=grid,
        in_specs=[
            scalar_spec(backend, lambda bi, hi, si: (bi,)),
            pl.BlockSpec((None, None, rows, d), lambda bi, hi, si: (bi, hi, 0, 0)),
            kv_spec,
            kv_spec,
            pl.BlockSpec((None, 1, split_len), lambda bi, hi, si: (bi, 0, si)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, None, rows, d), lambda bi, hi, si: (bi, hi, si, 0, 0)),
            row_spec,
            row_spec,
        ],
        out_shape=[
            jax.ShapeDtypeStruct((b, hkv, num_splits, rows, d), jnp.float32),
            jax.ShapeDtypeStruct((b, hkv, num_splits, rows, 1), jnp.float32),
            jax.ShapeDtypeStruct((b, hkv, num_splits, rows, 1), jnp.float32),
        ],
        name="decode_attention",
        **call_kwargs(backend, len(grid)),
    )(lengths, qg, k_cache, v_cache, mask)
    out, lse = combine_splits(acc, m, l, with_lse=True)
    out = out[:, :, :groups].reshape(b, h, d).astype(q.dtype)
    out = out if squeeze else out[:, None]
    return (out, lse[:, :, :groups, 0].reshape(b, h)) if return_lse else out
