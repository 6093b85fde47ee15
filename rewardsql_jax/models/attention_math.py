"""The attention math of the decoder (pure functions): RoPE, grouped-query attention, its query-chunked causal
form for prefills and training, the one-query decode form, and shared-prefix attention (a prompt's keys/values read
once for all of its samples). ``models.transformer`` wires them into the layers; the Pallas kernels in ``kernels/``
are tested against them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rope_tables(positions, head_dim: int, theta: float):
    """cos/sin ``[B, T, head_dim]`` for integer positions ``[B, T]`` (RoFormer Eq. 34, HF layout)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x, cos, sin):
    """Rotate ``x [B, T, H, D]`` by the tables of ``rope_tables`` (computed in fp32)."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)


def attention(q, k, v, mask):
    """Scaled dot-product attention with grouped KV heads.

    q ``[B, T, H, D]``, k/v ``[B, S, Hkv, D]``, mask ``[B, T, S]`` (True = attend). Softmax in fp32.
    Rows with no visible key (padding queries) return a harmless average instead of NaN.
    """
    b, t, h, d = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, t, hkv, h // hkv, d)
    if t == 1:
        return _single_query_attention(q, k, v, mask).reshape(b, t, h, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(d).astype(jnp.float32)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, d)


def causal_attention_in_query_chunks(q, k, v, key_mask, *, chunk: int = 128, max_chunks: int = 8):
    """Causal self-attention over a fresh sequence (a prefill or a training forward): query i sees key j iff
    j <= i and ``key_mask``.

    Computed one query chunk at a time: chunk c reads only the keys up to its last query, so the masked upper
    triangle is never computed ((n + 1) / 2n of the dense work for n chunks), and each chunk's softmax is
    normalised after the PV matmul (a ``[.., chunk, D]`` divide instead of ``[.., chunk, S]``). The same values as
    ``attention`` with the causal & key-padding mask. q ``[B, T, H, D]``, k/v ``[B, T, Hkv, D]``,
    key_mask ``[B, T]``. Chunks are ``chunk`` queries long, or longer so that there are at most ``max_chunks``
    (each chunk is its own ops in the program: long sequences would otherwise compile slowly).
    """
    b, t, h, d = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, t, hkv, h // hkv, d)
    scale = 1.0 / jnp.sqrt(jnp.float32(d))
    key_mask = key_mask.astype(bool)
    chunk = max(chunk, -(-t // max_chunks))
    outs = []
    for start in range(0, t, chunk):
        end = min(start + chunk, t)
        scores = jnp.einsum("btkgd,bskd->bkgts", q[:, start:end], k[:, :end], preferred_element_type=jnp.float32)
        visible = (jnp.arange(end)[None, :] <= jnp.arange(start, end)[:, None])[None] & key_mask[:, None, :end]
        scores = jnp.where(visible[:, None, None], scores * scale, jnp.finfo(jnp.float32).min)
        e = jnp.exp(scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True)))  # as jax.nn.softmax
        denom = jnp.sum(e, axis=-1).transpose(0, 3, 1, 2)[..., None]  # [B, chunk, Hkv, groups, 1]
        out = jnp.einsum("bkgts,bskd->btkgd", e.astype(v.dtype), v[:, :end], preferred_element_type=jnp.float32)
        outs.append((out / denom).astype(v.dtype))
    return jnp.concatenate(outs, axis=1).reshape(b, t, h, d)


def _single_query_attention(q, k, v, mask):
    """One query per row (a decode step) as multiply-and-reduce over the cache in its stored ``[B, S, Hkv, D]``
    layout: a dot_general here makes XLA transpose (copy) the whole cache of every layer at every step.
    q ``[B, 1, Hkv, G, D]``, mask ``[B, 1, S]`` -> ``[B, 1, Hkv, G, D]``."""
    d = q.shape[-1]
    scale = 1.0 / jnp.sqrt(jnp.float32(d))
    scores = jnp.sum(q[:, 0, None].astype(jnp.float32) * k[:, :, :, None, :].astype(jnp.float32), axis=-1) * scale
    scores = jnp.where(mask[:, 0, :, None, None], scores, jnp.finfo(jnp.float32).min)  # [B, S, Hkv, G]
    probs = jax.nn.softmax(scores, axis=1)
    out = jnp.sum(probs[..., None] * v[:, :, :, None, :].astype(jnp.float32), axis=1)  # [B, Hkv, G, D]
    return out[:, None].astype(v.dtype)


def prefix_attention(q, k, v, mask, *, prefix_k, prefix_v, prefix_mask, common_k=None, common_v=None):
    """Attention of rows that share prompts, the prompts' keys/values stored once (shared-prefix decoding).

    Rows are prompt-major: ``B = P * G`` rows, G per prompt. q ``[B, T, H, D]``; k/v ``[B, Hkv, S, D]`` and
    mask ``[B, T, S]`` are each row's own (generated) slots; prefix_k/prefix_v ``[P, Hkv, W, D]`` and
    prefix_mask ``[P, W]`` are the prompts, which every query sees in full. Both caches are heads-first, so
    every matmul reads them in place. The result equals ``attention`` over each row's ``prompt + own``
    cache (one softmax over W + S keys), computed as two blocks that share the row maximum and the
    denominator (the two-block form of the online softmax, FlashAttention-2 Alg. 1): a prompt's cache is
    read once per prompt instead of once per row, and no ``[B, T, W + S]`` score tensor is concatenated or
    transposed. ``common_k``/``common_v`` ``[1, Hkv, C, D]``: keys/values before every prompt, seen in full by
    every row (the schema all of a batch's questions start with): a third block, read once for the batch.
    """
    b, t, h, d = q.shape
    p, hkv, w, _ = prefix_k.shape
    g, groups = b // p, h // hkv
    scale = 1.0 / jnp.sqrt(jnp.float32(d))
    neg = jnp.finfo(jnp.float32).min
    q = q.reshape(b, t, hkv, groups, d)
    cdt = q.dtype  # matmul operands stay in the compute dtype (bf16 caches are not copied to fp32); fp32 results
    # prompt block [P, Hkv, R, W], R = G * T * groups: every query of a prompt's rows in one matmul

    def rows_per_prompt(x):  # [B, ...] -> [P, G, ...]
        return x.reshape(p, g, *x.shape[1:])

    qp = rows_per_prompt(q).transpose(0, 3, 1, 2, 4, 5).reshape(p, hkv, g * t * groups, d)
    s_prefix = jnp.einsum("pkqd,pkwd->pkqw", qp, prefix_k.astype(cdt), preferred_element_type=jnp.float32) * scale
    s_prefix = jnp.where(prefix_mask[:, None, None, :].astype(bool), s_prefix, neg)
    # own block [B, Hkv, T, groups, S]
    s_own = jnp.einsum("btkgd,bksd->bktgs", q, k.astype(cdt), preferred_element_type=jnp.float32) * scale
    s_own = jnp.where(mask[:, None, :, None, :], s_own, neg)

    # the two blocks' per-query statistics in the row layout [B, Hkv, T, groups]
    def to_rows(x):
        return x.reshape(p, hkv, g, t, groups, *x.shape[3:]).swapaxes(1, 2).reshape(b, hkv, t, groups, *x.shape[3:])

    def to_prompts(x):
        return x.reshape(p, g, hkv, t, groups).swapaxes(1, 2).reshape(p, hkv, g * t * groups)

    # the row maximum only keeps exp() in range; softmax does not depend on it, so no gradient flows through it
    # (as in jax.nn.softmax), and the backward pass keeps no copy of the scores for the max
    m = jnp.maximum(to_rows(jnp.max(s_prefix, axis=-1)), jnp.max(s_own, axis=-1))
    if common_k is not None:  # [1, Hkv, B * T * groups, C]: every query of the batch in one matmul

        def from_common(x):  # [1, Hkv, B * T * groups, ...] -> [B, Hkv, T, groups, ...]
            return x.reshape(hkv, b, t, groups, *x.shape[3:]).swapaxes(0, 1)

        qc = q.transpose(2, 0, 1, 3, 4).reshape(1, hkv, b * t * groups, d)
        s_common = jnp.einsum("pkqd,pkwd->pkqw", qc, common_k.astype(cdt), preferred_element_type=jnp.float32) * scale
        m = jnp.maximum(m, from_common(jnp.max(s_common, axis=-1)))
    m = jax.lax.stop_gradient(m)
    e_prefix = jnp.exp(s_prefix - to_prompts(m)[..., None])
    e_own = jnp.exp(s_own - m[..., None])
    denom = to_rows(jnp.sum(e_prefix, axis=-1)) + jnp.sum(e_own, axis=-1)
    vdt = v.dtype  # unnormalised probabilities in [0, 1] enter the PV matmuls in the cache dtype
    out = to_rows(
        jnp.einsum("pkqw,pkwd->pkqd", e_prefix.astype(vdt), prefix_v.astype(vdt), preferred_element_type=jnp.float32)
    )
    out = out + jnp.einsum("bktgs,bksd->bktgd", e_own.astype(vdt), v, preferred_element_type=jnp.float32)
    if common_k is not None:
        e_common = jnp.exp(s_common - m.swapaxes(0, 1).reshape(1, hkv, b * t * groups)[..., None])
        denom = denom + from_common(jnp.sum(e_common, axis=-1))
        pv = jnp.einsum(
            "pkqw,pkwd->pkqd", e_common.astype(vdt), common_v.astype(vdt), preferred_element_type=jnp.float32
        )
        out = out + from_common(pv)
    out = out / denom[..., None]  # [B, Hkv, T, groups, D]
    return out.transpose(0, 2, 1, 3, 4).reshape(b, t, h, d).astype(v.dtype)
