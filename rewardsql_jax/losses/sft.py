"""Masked token cross-entropy (supervised fine-tuning; Reward-SQL cold start / SFT, SQLConductor SFT)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..ops import first_argmax
from .normalisation import Normalisation, reduce
from .registry import register
from .shapes import check_choice, check_rank, check_same_shape

SFT_REDUCTIONS = ("token_mean", "sequence_mean")  # the normalisations (losses.REDUCTIONS) an SFT loss offers


def token_nll(logits, targets):
    """Per-token negative log-likelihood -log softmax(logits)[target], computed in fp32 even for bf16 logits."""
    logp = jax.nn.log_softmax(jnp.asarray(logits).astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, jnp.asarray(targets)[..., None].astype(jnp.int32), axis=-1)[..., 0]


def option_reduction(options: dict):
    """The normalisation of a loss whose ``reduction`` option (token_mean | sequence_mean) names it."""
    return options.get("reduction", "token_mean")


@register("sft", family="supervised", reduction=option_reduction)
def sft(logits, targets, mask, *, reduction: str = "token_mean", weights=None):
    """Masked cross-entropy: maximum likelihood of the target tokens (Reward-SQL Sec. 5.2 L_RS / cold start).

    token_mean:    sum_{b,t} w_b m_bt nll_bt / sum_{b,t} m_bt  (HF / TRL SFT default).
    sequence_mean: mean over sequences with >= 1 target token of (sum_t w_b m_bt nll_bt / sum_t m_bt).

    Args:
      logits: [B, T, V] (already aligned: logits[:, t] predict targets[:, t]).
      targets: [B, T] int token ids.
      mask: [B, T] 1 on tokens that count (prompt tokens and, in SQLConductor, <results> spans are 0).
      weights: optional [B] per-sequence weights (SQLConductor stability-weighted SFT); default 1.
    Returns: (loss, metrics) with token_accuracy (argmax == target over masked tokens) and num_tokens.
    """
    check_rank("logits", logits, 3, "[B, T, V]")
    check_same_shape("logits[..., 0]", logits[..., 0], targets=targets, mask=mask)
    correct = (first_argmax(logits) == jnp.asarray(targets)).astype(jnp.float32)
    return sft_from_logprobs(-token_nll(logits, targets), correct, mask, reduction=reduction, weights=weights)


def sft_from_logprobs(logprobs, correct, mask, *, reduction: str = "token_mean", weights=None):
    """``sft`` given each position's target log-prob ``[B, T]`` and whether the target is the (first) argmax
    ``[B, T]`` instead of the logits: what the train step calls when it computes both in one fused vocabulary
    op (``training.vocab_head``). Same reductions, weights and metrics as ``sft``."""
    check_same_shape("logprobs", logprobs, correct=correct, mask=mask)
    check_choice("reduction", reduction, SFT_REDUCTIONS)
    nll = -jnp.asarray(logprobs, jnp.float32)
    m = jnp.asarray(mask, jnp.float32)
    w_nll = nll
    if weights is not None:
        if tuple(jnp.shape(weights)) != (nll.shape[0],):
            raise ValueError(
                f"weights must have shape [{nll.shape[0]}] (one per sequence), got {tuple(jnp.shape(weights))}."
            )
        w_nll = nll * jnp.asarray(weights, jnp.float32)[:, None]
    loss = reduce(w_nll, m, Normalisation(reduction))
    metrics = {
        "token_accuracy": jnp.sum(correct * m) / jnp.maximum(jnp.sum(m), 1.0),
        "num_tokens": jnp.sum(m),
    }
    return loss, metrics


# the train step's fused path: a supervised loss that names its target-log-prob form here gets it
sft.from_logprobs = sft_from_logprobs  # type: ignore[attr-defined]  # a function attribute, which mypy does not model
