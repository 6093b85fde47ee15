"""Decode attention of rows that share prompts (GRPO groups), each prompt's KV cache stored once.

The sampler keeps one prompt cache per prompt ``[P, Hkv, W, D]`` and one cache of generated tokens per row
``[B, Hkv, C, D]`` (``B = P * G`` rows, prompt-major). A decode step is one softmax over ``W + C`` keys,
computed here as two decode-attention calls whose results are merged by their log-sum-exps:

* prompt block: the ``G * H / Hkv`` query heads of a prompt's rows that share a KV head are stacked as the
  query heads of one "sequence" (the prompt), so each prompt's K/V blocks are read once for all its rows;
* own block: ordinary per-row decode attention over the generated slots;
* merge: ``out = o_p * exp(lse_p - lse) + o_o * exp(lse_o - lse)``, ``lse = logaddexp(lse_p, lse_o)``
  (the split-combining step of flash-decoding, Dao et al. 2023, over two splits).

``decode`` is ``decode_attention`` (Pallas) or ``decode_attention_reference``; the result equals
``models.attention_math.prefix_attention`` (tested).
"""

from __future__ import annotations

import jax.numpy as jnp


def prefix_decode_attention(q, k, v, own_mask, *, prefix_k, prefix_v, prefix_mask, decode):
    """q ``[B, H, D]`` or ``[B, 1, H, D]``; own caches k/v ``[B, Hkv, C, D]`` with ``own_mask [B, C]``;
    prompt caches ``[P, Hkv, W, D]`` with ``prefix_mask [P, W]``; ``decode``: a decode-attention function
    taking ``kv_heads_first`` and ``return_lse``. Returns q's shape."""
    squeeze = q.ndim == 3
    q3 = q if squeeze else q[:, 0]
    b, h, d = q3.shape
    p, hkv = prefix_k.shape[:2]
    g, groups = b // p, h // hkv
    # [B, H, D] -> [P, Hkv * G * groups, D]: KV-head-major, so the kernel's GQA grouping maps every query of
    # a prompt's rows that reads KV head j to head j
    qp = q3.reshape(p, g, hkv, groups, d).transpose(0, 2, 1, 3, 4).reshape(p, hkv * g * groups, d)
    o_p, lse_p = decode(qp, prefix_k, prefix_v, key_mask=prefix_mask, kv_heads_first=True, return_lse=True)
    o_p = o_p.reshape(p, hkv, g, groups, d).transpose(0, 2, 1, 3, 4).reshape(b, h, d)
    lse_p = lse_p.reshape(p, hkv, g, groups).transpose(0, 2, 1, 3).reshape(b, h)
    o_o, lse_o = decode(q3, k, v, key_mask=own_mask, kv_heads_first=True, return_lse=True)
    lse = jnp.logaddexp(lse_p, lse_o)
    safe = jnp.where(jnp.isfinite(lse), lse, 0.0)  # no visible key at all: both weights 0, output 0
    w_p, w_o = jnp.exp(lse_p - safe)[..., None], jnp.exp(lse_o - safe)[..., None]
    out = (o_p.astype(jnp.float32) * w_p + o_o.astype(jnp.float32) * w_o).astype(q.dtype)
    return out if squeeze else out[:, None]
