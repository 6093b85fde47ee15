"""Pallas backward of ``flash_attention`` (FlashAttention-2, Dao 2023, Algorithm 2).

With ``P = exp(S - lse)`` recomputed block by block from the saved log-sum-exp, the gradients are
``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - delta)`` with ``delta = rowsum(dO * O)``,
``dQ = dS K * scale`` and ``dK = dS^T Q * scale``. As in FA2 (and the Triton tutorial) the work is
split in two kernels so that no program needs atomics:

* ``dK/dV``: one program per (batch, query head, KV block), looping over the query blocks that can
  see it (causality bounds the loop from below);
* ``dQ``: one program per (batch, query head, query block), looping over the visible KV blocks.

GQA: dK/dV are produced per query head and summed over the heads of each group in the wrapper.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from ._pallas_common import call_kwargs


def _probs_and_dscores(q, k, v, do, lse, delta, mask_block, q_start, k_start, cfg):
    """Recompute ``P`` and ``dS`` for one (query block, KV block) pair, fp32 ``[bq, bk]``.

    ``lse`` and ``delta`` are ``[bq, 1]`` columns."""
    from .flash_attention import scores, visible_block

    visible = visible_block(mask_block, q_start, k_start, cfg)
    p = jnp.where(visible, jnp.exp(scores(q, k, cfg.scale) - lse), 0.0)
    dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return p, p * (dp - delta)


def _dkdv_kernel(q_ref, k_ref, v_ref, mask_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, *, cfg, num_q_blocks):
    bq, bk = cfg.block_q, cfg.block_k
    kj = pl.program_id(2)
    k_start = kj * bk
    k = k_ref[...]
    v = v_ref[...]
    mask_block = mask_ref[...]

    def body(i, carry):
        dk, dv = carry
        start = pl.multiple_of(i * bq, bq)
        q = q_ref[pl.ds(start, bq), :]
        do = do_ref[pl.ds(start, bq), :]
        p, ds = _probs_and_dscores(
            q, k, v, do, lse_ref[pl.ds(start, bq), :], delta_ref[pl.ds(start, bq), :], mask_block, start, k_start, cfg
        )
        contract_rows = (((0,), (0,)), ((), ()))
        dv = dv + jax.lax.dot_general(p.astype(do.dtype), do, contract_rows, preferred_element_type=jnp.float32)
        dk = dk + jax.lax.dot_general(ds.astype(q.dtype), q, contract_rows, preferred_element_type=jnp.float32)
        return dk, dv

    # Causal: query blocks ending before this KV block starts see none of it.
    lo = jnp.maximum(0, (k_start - cfg.q_offset) // bq) if cfg.causal else 0
    zeros = jnp.zeros(k_ref.shape, jnp.float32)
    dk, dv = jax.lax.fori_loop(lo, num_q_blocks, body, (zeros, zeros))
    dk_ref[...] = (dk * cfg.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(q_ref, k_ref, v_ref, mask_ref, do_ref, lse_ref, delta_ref, dq_ref, *, cfg, num_kv_blocks):
    from .flash_attention import causal_kv_blocks

    bq, bk = cfg.block_q, cfg.block_k
    qi = pl.program_id(2)
    q = q_ref[...]
    do = do_ref[...]
    lse = lse_ref[...]
    delta = delta_ref[...]

    def body(j, dq):
        start = pl.multiple_of(j * bk, bk)
        k = k_ref[pl.ds(start, bk), :]
        v = v_ref[pl.ds(start, bk), :]
        _, ds = _probs_and_dscores(q, k, v, do, lse, delta, mask_ref[:, pl.ds(start, bk)], qi * bq, start, cfg)
        return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    hi = causal_kv_blocks(qi, cfg, num_kv_blocks)
    dq = jax.lax.fori_loop(0, hi, body, jnp.zeros(q_ref.shape, jnp.float32))
    dq_ref[...] = (dq * cfg.scale).astype(dq_ref.dtype)


def flash_backward(cfg, q, k, v, mask, out, lse, d_out):
    """Gradients ``(dq, dk, dv)`` on the kernel layout of ``flash_attention.flash_forward``.

    Runs with the backward block sizes ``cfg.block_q_bwd`` / ``cfg.block_k_bwd``.
    """
    cfg = dataclasses.replace(cfg, block_q=cfg.block_q_bwd, block_k=cfg.block_k_bwd)
    b, h, tp, d = q.shape
    hkv, sp = k.shape[1], k.shape[2]
    groups = h // hkv
    nq, nk = tp // cfg.block_q, sp // cfg.block_k
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    args = (q, k, v, mask, d_out, lse, delta)

    # dK, dV: grid over KV blocks; full query rows of one head per program.
    full_q = pl.BlockSpec((None, None, tp, d), lambda bi, hi, j: (bi, hi, 0, 0))
    full_row = pl.BlockSpec((None, None, tp, 1), lambda bi, hi, j: (bi, hi, 0, 0))
    kv_block = pl.BlockSpec((None, None, cfg.block_k, d), lambda bi, hi, j: (bi, hi // groups, j, 0))
    per_head_kv = pl.BlockSpec((None, None, cfg.block_k, d), lambda bi, hi, j: (bi, hi, j, 0))
    grid = (b, h, nk)
    dk, dv = pl.pallas_call(
        functools.partial(_dkdv_kernel, cfg=cfg, num_q_blocks=nq),
        grid=grid,
        in_specs=[
            full_q,
            kv_block,
            kv_block,
            pl.BlockSpec((None, 1, cfg.block_k), lambda bi, hi, j: (bi, 0, j)),
            full_q,
            full_row,
            full_row,
        ],
        out_specs=[per_head_kv, per_head_kv],
        out_shape=[jax.ShapeDtypeStruct((b, h, sp, d), k.dtype), jax.ShapeDtypeStruct((b, h, sp, d), v.dtype)],
        name="flash_attention_bwd_dkdv",
        **call_kwargs(cfg.backend, len(grid)),
    )(*args)
    if groups > 1:
        dk = dk.reshape(b, hkv, groups, sp, d).sum(axis=2, dtype=jnp.float32).astype(k.dtype)
        dv = dv.reshape(b, hkv, groups, sp, d).sum(axis=2, dtype=jnp.float32).astype(v.dtype)

    # dQ: grid over query blocks; full K/V of the group's KV head per program.
    q_block = pl.BlockSpec((None, None, cfg.block_q, d), lambda bi, hi, i: (bi, hi, i, 0))
    row_block = pl.BlockSpec((None, None, cfg.block_q, 1), lambda bi, hi, i: (bi, hi, i, 0))
    full_kv = pl.BlockSpec((None, None, sp, d), lambda bi, hi, i: (bi, hi // groups, 0, 0))
    grid = (b, h, nq)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, cfg=cfg, num_kv_blocks=nk),
        grid=grid,
        in_specs=[
            q_block,
            full_kv,
            full_kv,
            pl.BlockSpec((None, 1, sp), lambda bi, hi, i: (bi, 0, 0)),
            q_block,
            row_block,
            row_block,
        ],
        out_specs=q_block,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        name="flash_attention_bwd_dq",
        **call_kwargs(cfg.backend, len(grid)),
    )(*args)
    return dq, dk, dv
