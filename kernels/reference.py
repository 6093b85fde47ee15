"""Pure-jnp attention references: the ground truth the Pallas kernels are tested against and the
CPU fallback chosen by ``kernels.dispatch``.

Conventions shared with the kernels:

* q ``[B, T, H, D]``, k/v ``[B, S, Hkv, D]`` with grouped KV heads (GQA): query head ``h`` reads KV
  head ``h // (H // Hkv)`` (the grouping of ``models.attention_math.attention``).
* Padding is given by per-sequence ``kv_lengths [B]`` (keys ``s < length`` valid) and/or a boolean
  ``key_mask [B, S]`` (both are ANDed); ``causal`` lets query ``i`` see keys ``j <= q_offset + i``
  (``q_offset = 0``: self-attention of one sequence, or a prefill written at cache slot 0).
* Scores and softmax in fp32; the output has q's dtype. A query row with no visible key returns
  zeros (``models.attention_math.attention`` returns an average of V there instead; both are padding
  rows nobody reads, and zeros keep the gradient through them exactly zero).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._pallas_common import MASK_VALUE, key_mask_of


def _attend(q, k, v, visible, scale):
    """Softmax attention of ``q [B,T,H,D]`` over ``k, v [B,S,Hkv,D]`` under ``visible [B,T,S]``."""
    b, t, h, d = q.shape
    hkv = k.shape[2]
    if h % hkv:
        raise ValueError(f"num heads {h} is not a multiple of num kv heads {hkv}")
    scale = d**-0.5 if scale is None else scale
    qg = q.reshape(b, t, hkv, h // hkv, d)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * jnp.float32(scale)
    vis = visible[:, None, None, :, :]
    s = jnp.where(vis, s, MASK_VALUE)
    p = jax.nn.softmax(s, axis=-1)
    p = jnp.where(jnp.any(vis, axis=-1, keepdims=True), p, 0.0)
    out = jnp.einsum("bkgts,bskd->btkgd", p, v.astype(jnp.float32))
    return out.reshape(b, t, h, d).astype(q.dtype)


def mha_reference(q, k, v, *, causal: bool = True, q_offset: int = 0, kv_lengths=None, key_mask=None, scale=None):
    """Multi-head / grouped-query attention ``softmax(q k^T * scale) v`` (Vaswani et al. 2017).

    q ``[B, T, H, D]``, k/v ``[B, S, Hkv, D]``; ``kv_lengths [B]`` and/or ``key_mask [B, S]`` mark
    valid keys; ``causal`` masks keys after position ``q_offset + i`` for query ``i``; ``scale`` defaults to
    ``D**-0.5``. Returns ``[B, T, H, D]``.
    """
    b, t = q.shape[:2]
    s = k.shape[1]
    visible = key_mask_of(b, s, kv_lengths, key_mask)[:, None, :]
    if causal:
        visible = visible & jnp.tri(t, s, k=q_offset, dtype=bool)[None]
    else:
        visible = jnp.broadcast_to(visible, (b, t, s))
    return _attend(q, k, v, visible, scale)


def decode_attention_reference(
    q,
    k_cache,
    v_cache,
    *,
    lengths=None,
    key_mask=None,
    scale=None,
    kv_heads_first: bool = False,
    return_lse: bool = False,
):
    """One query token per sequence against a KV cache (the decode step of a sampler).

    q ``[B, H, D]`` or ``[B, 1, H, D]``; caches ``[B, S_max, Hkv, D]`` (``[B, Hkv, S_max, D]`` with
    ``kv_heads_first``); ``lengths [B]`` (slots ``< length`` valid) and/or ``key_mask [B, S_max]``.
    Returns q's shape, and with ``return_lse`` also the per-head log-sum-exp of the scaled scores ``[B, H]``
    (``-inf`` where no key is visible).
    """
    if kv_heads_first:
        k_cache, v_cache = k_cache.swapaxes(1, 2), v_cache.swapaxes(1, 2)
    squeeze = q.ndim == 3
    q4 = q[:, None] if squeeze else q
    if q4.shape[1] != 1:
        raise ValueError(f"decode attention takes one query token per sequence, got {q4.shape[1]}")
    out = mha_reference(q4, k_cache, v_cache, causal=False, kv_lengths=lengths, key_mask=key_mask, scale=scale)
    out = out[:, 0] if squeeze else out
    if not return_lse:
        return out
    b, _, h, d = q4.shape
    hkv = k_cache.shape[2]
    visible = key_mask_of(b, k_cache.shape[1], lengths, key_mask)
    scale = d**-0.5 if scale is None else scale
    scores = jnp.einsum(
        "bkgd,bskd->bkgs", q4[:, 0].reshape(b, hkv, h // hkv, d), k_cache, preferred_element_type=jnp.float32
    ) * jnp.float32(scale)
    scores = jnp.where(visible[:, None, None, :], scores, -jnp.inf)
    return out, jax.nn.logsumexp(scores, axis=-1).reshape(b, h)
