"""Rejection-sampling fine-tuning (Reward-SQL Sec. 5.2, RS): SFT on the candidates whose reward exceeds tau."""

from __future__ import annotations

import jax.numpy as jnp

from .registry import register
from .sft import sft


@register("rs", family="supervised")
def rs(logits, targets, mask, rewards, *, threshold: float = 0.0, reduction: str = "token_mean"):
    """L_RS = -E_{(q, C) in D_filtered} log pi(C | q) with D_filtered = {C_i : R_i > tau} (Reward-SQL Sec. 5.2).

    The filter is applied inside the loss by zeroing the mask of rejected candidates, so a fixed-shape batch
    of all N candidates stays jit-friendly; the mean runs over the kept tokens only (0 if nothing is kept).

    Args:
      logits [B, T, V], targets [B, T], mask [B, T]: as in `sft`.
      rewards: [B] candidate rewards R_i (e.g. PR + OR); kept when strictly greater than `threshold`.
    Returns: (loss, metrics) with sft's metrics plus kept_fraction.
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.shape != (jnp.shape(logits)[0],):
        raise ValueError(
            f"rewards must have shape [{jnp.shape(logits)[0]}] (one per candidate), got {tuple(rewards.shape)}."
        )
    keep = (rewards > threshold).astype(jnp.float32)
    loss, metrics = sft(logits, targets, jnp.asarray(mask, jnp.float32) * keep[:, None], reduction=reduction)
    metrics["kept_fraction"] = jnp.mean(keep)
    return loss, metrics
