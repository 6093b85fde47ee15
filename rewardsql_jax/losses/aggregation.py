"""Reduction of a masked per-token loss to a scalar (TRL GRPOTrainer `loss_type`, verl `loss_agg_mode`)."""

from __future__ import annotations

import jax.numpy as jnp

AGG_MODES = ("grpo", "bnpo", "dr_grpo", "dapo", "token_mean")


def aggregate(per_token, mask, mode: str = "grpo", *, max_len: int | None = None, num_items_in_batch=None):
    """Aggregate a [B, T] per-token loss over the masked tokens (TRL GRPOTrainer._compute_loss).

    Modes (TRL `loss_type` names; "token_mean" is verl's name for bnpo):
      grpo:       mean_b( sum_t l*m / max(sum_t m, 1) )          (GRPO paper, Shao et al. 2024, Eq. 3)
      bnpo:       sum l*m / max(sum m, 1)                         (token mean over the local batch)
      token_mean: same as bnpo                                    (verl loss_agg_mode="token-mean")
      dr_grpo:    sum l*m / (B * max_len)                         (Dr. GRPO, Liu et al. 2025; max_len defaults to T,
                                                                   TRL uses max_completion_length)
      dapo:       sum l*m / num_items_in_batch                    (DAPO, Yu et al. 2025, Eq. 8; TRL normalises by the
                                                                   number of active tokens of the whole generation
                                                                   batch across processes. Pass that count when this
                                                                   call sees only a micro-batch; default: sum m here)
    """
    mask = mask.astype(per_token.dtype)
    total = jnp.sum(per_token * mask)
    if mode == "grpo":
        per_seq = jnp.sum(per_token * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)
        return jnp.mean(per_seq)
    if mode in ("bnpo", "token_mean"):
        return total / jnp.maximum(jnp.sum(mask), 1.0)
    if mode == "dr_grpo":
        length = per_token.shape[-1] if max_len is None else max_len
        return total / (per_token.shape[0] * length)
    if mode == "dapo":
        denom = jnp.sum(mask) if num_items_in_batch is None else num_items_in_batch
        return total / jnp.maximum(denom, 1.0)
    raise ValueError(f"agg={mode!r} is not an aggregation mode; choose one of {list(AGG_MODES)}.")


def masked_mean(x, mask):
    """Mean of `x` over the tokens where mask is 1 (0 when the mask is empty)."""
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)
