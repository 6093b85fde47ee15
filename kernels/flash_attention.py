"""Causal flash attention with grouped KV heads in Pallas (FlashAttention-2, Dao 2023).

Forward (FA2 Algorithm 1): one program per (batch, query head, query block); it walks the KV blocks
of its KV head with an online softmax (running max ``m``, running sum ``l``, unnormalised ``acc``) and
never materialises the ``[T, S]`` score matrix. Causality bounds the loop (KV blocks entirely after
the query block are skipped); padding comes from a ``[B, S]`` key mask (from ``kv_lengths`` or
``key_mask``). The log-sum-exp ``m + log l`` of every row is saved for the backward pass.

Backward: a custom VJP running the two Pallas kernels of ``flash_attention_bwd`` (FA2 Algorithm 2),
which recompute the probabilities from the saved log-sum-exp instead of storing them.

GQA: query head ``h`` reads KV head ``h // (H // Hkv)`` through the BlockSpec index map, so K/V are
never repeated in memory. Lengths that are not block multiples are padded inside the wrapper (padded
keys are masked, padded queries are sliced off). Rows with no visible key return zeros.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from ._pallas_common import MASK_VALUE, call_kwargs, key_mask_of, kv_block_size, pad_axis, resolve_backend
from .flash_attention_bwd import flash_backward


@dataclasses.dataclass(frozen=True)
class FlashConfig:
    """Static configuration of one flash-attention call (hashable: a ``custom_vjp`` nondiff arg)."""

    scale: float
    causal: bool
    q_offset: int  # causal: query i sits at key position q_offset + i
    block_q: int
    block_k: int
    block_q_bwd: int
    block_k_bwd: int
    backend: str  # "tpu" | "gpu" | "interpret"


def causal_kv_blocks(q_block, cfg: FlashConfig, num_kv_blocks: int):
    """Number of KV blocks query block ``q_block`` must visit (all of them unless causal)."""
    if not cfg.causal:
        return num_kv_blocks
    return jnp.minimum(num_kv_blocks, pl.cdiv((q_block + 1) * cfg.block_q + cfg.q_offset, cfg.block_k))


def visible_block(key_mask_block, q_start, k_start, cfg: FlashConfig):
    """``[block_q, block_k]`` visibility: key mask (``[1, block_k]`` int32) and causal order."""
    shape = (cfg.block_q, cfg.block_k)
    visible = jnp.broadcast_to(key_mask_block != 0, shape)
    if cfg.causal:
        q_pos = q_start + cfg.q_offset + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
        k_pos = k_start + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
        visible = visible & (q_pos >= k_pos)
    return visible


def scores(q, k, scale: float):
    """``q k^T * scale`` in fp32 for ``q [bq, D]``, ``k [bk, D]``."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return s * scale


def _forward_kernel(q_ref, k_ref, v_ref, mask_ref, o_ref, lse_ref, *, cfg: FlashConfig, num_kv_blocks: int):
    bq, bk = cfg.block_q, cfg.block_k
    qi = pl.program_id(2)
    q = q_ref[...]

    def body(j, carry):
        m, l, acc = carry
        start = pl.multiple_of(j * bk, bk)
        k = k_ref[pl.ds(start, bk), :]
        v = v_ref[pl.ds(start, bk), :]
        visible = visible_block(mask_ref[:, pl.ds(start, bk)], qi * bq, start, cfg)
        s = jnp.where(visible, scores(q, k, cfg.scale), MASK_VALUE)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        p = jnp.where(visible, jnp.exp(s - m_new), 0.0)
        alpha = jnp.exp(m - m_new)
        l = l * alpha + jnp.sum(p, axis=1, keepdims=True)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return m_new, l, acc * alpha + pv

    # Row statistics are [bq, 1] columns (TPU-friendly layout; broadcast against [bq, bk]).
    init = (
        jnp.full((bq, 1), MASK_VALUE, jnp.float32),
        jnp.zeros((bq, 1), jnp.float32),
        jnp.zeros((bq, q_ref.shape[-1]), jnp.float32),
    )
    hi = causal_kv_blocks(qi, cfg, num_kv_blocks)
    m, l, acc = jax.lax.fori_loop(0, hi, body, init)
    empty = l == 0.0  # no visible key: output zeros
    l_safe = jnp.where(empty, 1.0, l)
    o_ref[...] = (acc / l_safe).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(l_safe)


def flash_forward(cfg: FlashConfig, q, k, v, mask):
    """Pallas forward on kernel layout: q ``[B,H,Tp,D]``, k/v ``[B,Hkv,Sp,D]``, mask ``[B,1,Sp]`` int32.

    Returns ``(out [B,H,Tp,D], lse [B,H,Tp,1] fp32)``.
    """
    b, h, tp, d = q.shape
    hkv, sp = k.shape[1], k.shape[2]
    groups = h // hkv
    grid = (b, h, tp // cfg.block_q)
    kv_spec = pl.BlockSpec((None, None, sp, d), lambda bi, hi, qi: (bi, hi // groups, 0, 0))
    kernel = functools.partial(_forward_kernel, cfg=cfg, num_kv_blocks=sp // cfg.block_k)
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, None, cfg.block_q, d), lambda bi, hi, qi: (bi, hi, qi, 0)),
            kv_spec,
            kv_spec,
            pl.BlockSpec((None, 1, sp), lambda bi, hi, qi: (bi, 0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, cfg.block_q, d), lambda bi, hi, qi: (bi, hi, qi, 0)),
            pl.BlockSpec((None, None, cfg.block_q, 1), lambda bi, hi, qi: (bi, hi, qi, 0)),
        ],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, tp, 1), jnp.float32)],
        name="flash_attention_fwd",
        **call_kwargs(cfg.backend, len(grid), num_warps=4 if d <= 64 else 8),
    )(q, k, v, mask)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(cfg: FlashConfig, q, k, v, mask):
    return flash_forward(cfg, q, k, v, mask)[0]


def _flash_fwd(cfg, q, k, v, mask):
    out, lse = flash_forward(cfg, q, k, v, mask)
    return out, (q, k, v, mask, out, lse)


def _flash_bwd(cfg, residuals, d_out):
    q, k, v, mask, out, lse = residuals
    dq, dk, dv = flash_backward(cfg, q, k, v, mask, out, lse, d_out)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def flash_attention(
    q,
    k,
    v,
    *,
    causal: bool = True,
    q_offset: int = 0,
    kv_lengths=None,
    key_mask=None,
    scale: float | None = None,
    block_q: int = 128,
    block_k: int = 128,
    block_q_bwd: int | None = None,
    block_k_bwd: int | None = None,
    backend: str | None = None,
    interpret: bool = False,
):
    """Flash attention ``softmax(q k^T * scale) v`` with GQA, causality and key padding.

    q ``[B, T, H, D]``, k/v ``[B, S, Hkv, D]`` (H a multiple of Hkv); ``kv_lengths [B]`` and/or
    ``key_mask [B, S]`` mark valid keys; ``causal``: query i sees keys ``<= q_offset + i`` (a static
    int; 0 for self-attention and for a prefill written at cache slot 0, ``S - T`` for the last chunk).
    Same semantics as ``reference.mha_reference``; differentiable (Pallas backward kernels).
    ``backend`` is ``"tpu"``/``"gpu"`` (default: the current platform); ``interpret=True`` runs the
    kernels in the Pallas interpreter (CPU tests). Block sizes are powers of two, clipped to the
    padded lengths (on TPU the KV block is rounded up to 128 lanes, see ``kv_block_size``). The
    backward blocks default to 32 on GPU (its dK/dV accumulators live in registers, as in the
    Triton FA2 tutorial) and to the forward blocks elsewhere.
    """
    b, t, h, d = q.shape
    s, hkv = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"num heads {h} is not a multiple of num kv heads {hkv}")
    if q_offset < 0:
        raise ValueError(f"q_offset must be >= 0, got {q_offset}")
    backend = resolve_backend(backend, interpret)
    bwd_default = 32 if backend == "gpu" else None
    block_q_bwd = block_q_bwd or bwd_default or block_q
    block_k_bwd = block_k_bwd or bwd_default or block_k
    cfg = FlashConfig(
        scale=float(d**-0.5 if scale is None else scale),
        causal=causal,
        q_offset=int(q_offset),
        block_q=min(block_q, pl.next_power_of_2(t)),
        block_k=kv_block_size(block_k, s, backend),
        block_q_bwd=min(block_q_bwd, pl.next_power_of_2(t)),
        block_k_bwd=kv_block_size(block_k_bwd, s, backend),
        backend=backend,
    )
    # Pad to a multiple of both block sizes (powers of two: the larger one).
    q_multiple = max(cfg.block_q, cfg.block_q_bwd)
    k_multiple = max(cfg.block_k, cfg.block_k_bwd)
    mask = key_mask_of(b, s, kv_lengths, key_mask).astype(jnp.int32)[:, None, :]
    mask = pad_axis(mask, 2, k_multiple)
    qt = pad_axis(q.transpose(0, 2, 1, 3), 2, q_multiple)
    kt = pad_axis(k.transpose(0, 2, 1, 3), 2, k_multiple)
    vt = pad_axis(v.transpose(0, 2, 1, 3), 2, k_multiple)
    out = _flash(cfg, qt, kt, vt, mask)
    return out[:, :, :t].transpose(0, 2, 1, 3)


def flash_attention_from_mask(q, k, v, mask, **kwargs):
    """Drop-in for ``models.attention_math.attention(q, k, v, mask)`` when ``mask [B, T, T]`` is
    ``causal & key_mask[:, None, :]`` (the mask of ``CausalLM.hidden_states``).

    The key mask is read off the last query row (under such a mask it sees every valid key); the
    function does not check that the mask has that form. Rows with no visible key (left-padding
    queries) give zeros where ``attention_math.attention`` gives an average; valid rows agree.
    """
    return flash_attention(q, k, v, causal=True, key_mask=mask[:, -1, :], **kwargs)
