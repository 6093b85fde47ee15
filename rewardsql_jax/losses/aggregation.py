"""Reduction of a masked per-token loss to a scalar (TRL GRPOTrainer `loss_type`, verl `loss_agg_mode`).

Each mode is a normalisation of ``normalisation.py`` (its one table of denominators), so the train step
accumulates a loss reduced by ``agg`` exactly: ``agg_normalisation`` is what grpo and reinforce_pp register with.
"""

from __future__ import annotations

import jax.numpy as jnp

from .normalisation import Normalisation, reduce
from .shapes import check_choice

# TRL loss_type / verl loss_agg_mode -> normalisation (normalisation.DENOMINATORS)
AGG_NORMALISATION = {
    "grpo": "row_mean",
    "bnpo": "token_mean",
    "dr_grpo": "fixed_length",
    "dapo": "token_mean",
    "token_mean": "token_mean",
}
AGG_MODES = tuple(AGG_NORMALISATION)


def agg_normalisation(options: dict, *, default: str) -> Normalisation:
    """The normalisation of a loss reduced by ``aggregate(..., options["agg"], max_len=options["max_len"])``."""
    agg = options.get("agg", default)
    check_choice("agg", agg, AGG_MODES)
    return Normalisation(AGG_NORMALISATION[agg], length=options.get("max_len"))


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
    if mode not in AGG_MODES:
        raise ValueError(f"agg={mode!r} is not an aggregation mode; choose one of {list(AGG_MODES)}.")
    count = num_items_in_batch if mode == "dapo" else None
    return reduce(per_token, mask, Normalisation(AGG_NORMALISATION[mode], length=max_len), count=count)


def masked_mean(x, mask):
    """Mean of `x` over the tokens where mask is 1 (0 when the mask is empty)."""
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)
