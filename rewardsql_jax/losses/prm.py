"""Reward-SQL PRM objective: binary cross-entropy of the "+" probability at each step tag (Sec. 4, PRM training)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .aggregation import masked_mean
from .registry import register
from .shapes import check_rank, check_same_shape


def step_scores(tag_logits):
    """Step score s = softmax([l_+, l_-])[0] = P(" +") at each step tag (DESIGN.md, Reward-SQL PRM scoring)."""
    return jax.nn.softmax(jnp.asarray(tag_logits, jnp.float32), axis=-1)[..., 0]


@register("prm", family="prm", reduction="token_mean")
def prm(tag_logits, labels, mask, *, pos_weight: float = 1.0):
    """PRM loss: mean over masked steps of BCE(P(+), label), P(+) = softmax over the (" +", " -") logits.

    loss = -sum_s m_s [w y_s log p_s + (1 - y_s) log(1 - p_s)] / sum_s m_s, with log p = log_softmax(l)[0],
    log(1 - p) = log_softmax(l)[1] (stable for large logits; Reward-SQL trains the PRM as a 2-way
    classifier at the step tag " и" with hard 0/1 labels from MCTS). ``pos_weight`` w scales the positive
    term as ``torch.nn.BCEWithLogitsLoss(pos_weight=w)`` does (the paper "balances the data set"; w =
    n_neg / n_pos is the class-balancing choice); w = 1 is the paper's plain BCE.

    Args:
      tag_logits: [B, S, 2] logits of the " +" and " -" tokens at each step-tag position.
      labels: [B, S] hard labels (1 = correct step, 0 = wrong).
      mask: [B, S] 1 on real steps.
      pos_weight: weight of the positive (label 1) term, > 0.
    Returns: (loss, metrics) with accuracy (P(+) > 0.5 matches label), score/mean, num_steps.
    """
    check_rank("tag_logits", tag_logits, 3, "[B, S, 2] of (' +', ' -') logits at each step tag")
    if tag_logits.shape[-1] != 2:
        raise ValueError(f"tag_logits must end in 2 logits (' +', ' -'), got shape {tuple(tag_logits.shape)}.")
    check_same_shape("tag_logits[..., 0]", tag_logits[..., 0], labels=labels, mask=mask)
    if isinstance(pos_weight, (int, float)) and not pos_weight > 0:
        raise ValueError(f"pos_weight must be positive, got {pos_weight}")
    logp = jax.nn.log_softmax(jnp.asarray(tag_logits, jnp.float32), axis=-1)
    y = jnp.asarray(labels, jnp.float32)
    m = jnp.asarray(mask, jnp.float32)
    nll = -(pos_weight * y * logp[..., 0] + (1.0 - y) * logp[..., 1])
    p = jax.lax.stop_gradient(jnp.exp(logp[..., 0]))
    metrics = {
        "accuracy": masked_mean(((p > 0.5) == (y > 0.5)).astype(jnp.float32), m),
        "score/mean": masked_mean(p, m),
        "num_steps": jnp.sum(m),
    }
    return masked_mean(nll, m), metrics
