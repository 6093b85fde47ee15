"""Rejection-sampling fine-tuning (Reward-SQL Sec. 5.2, RS): SFT on the candidates whose reward exceeds tau."""

from __future__ import annotations

import jax.numpy as jnp

from .registry import register
from .sft import option_reduction, sft, sft_from_logprobs


def kept_rows(rewards, *, threshold: float = 0.0, **_):
    """D_filtered's rows: 1 where R_i > tau, else 0 ([B] float). The supervised family's ``keep`` hook, so the
    train step's denominator counts the kept candidates' tokens (or sequences) only."""
    return (jnp.asarray(rewards, jnp.float32) > threshold).astype(jnp.float32)


def _filtered(sft_form, first, second, mask, rewards, threshold, reduction):
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.shape != (jnp.shape(first)[0],):
        raise ValueError(
            f"rewards must have shape [{jnp.shape(first)[0]}] (one per candidate), got {tuple(rewards.shape)}."
        )
    keep = kept_rows(rewards, threshold=threshold)
    loss, metrics = sft_form(first, second, jnp.asarray(mask, jnp.float32) * keep[:, None], reduction=reduction)
    metrics["kept_fraction"] = jnp.mean(keep)
    return loss, metrics


@register("rs", family="supervised", reduction=option_reduction, keep=kept_rows)
def rs(logits, targets, mask, rewards, *, threshold: float = 0.0, reduction: str = "token_mean"):
    """L_RS = -E_{(q, C) in D_filtered} log pi(C | q) with D_filtered = {C_i : R_i > tau} (Reward-SQL Sec. 5.2).

    The filter is applied inside the loss by zeroing the mask of rejected candidates, so a fixed-shape batch
    of all N candidates stays jit-friendly; the mean runs over the kept tokens only (0 if nothing is kept).

    Args:
      logits [B, T, V], targets [B, T], mask [B, T]: as in `sft`.
      rewards: [B] candidate rewards R_i (e.g. PR + OR); kept when strictly greater than `threshold`.
    Returns: (loss, metrics) with sft's metrics plus kept_fraction.
    """
    return _filtered(sft, logits, targets, mask, rewards, threshold, reduction)


def rs_from_logprobs(logprobs, correct, mask, rewards, *, threshold: float = 0.0, reduction: str = "token_mean"):
    """``rs`` given each position's target log-prob and first-argmax hit ``[B, T]`` instead of the logits (the
    train step's fused vocabulary op, as ``sft.from_logprobs``); same filter, reductions and metrics."""
    return _filtered(sft_from_logprobs, logprobs, correct, mask, rewards, threshold, reduction)


rs.from_logprobs = rs_from_logprobs  # type: ignore[attr-defined]  # as sft.from_logprobs
