"""What a loss's mean divides by: one table of denominators, and the one function that turns a loss's output
into the (numerator, denominator) pair the train step accumulates over micro-batches.

A loss is a mean of per-token (or per-row) terms. To accumulate micro-batches exactly, the train step needs the
mean's numerator and denominator separately: it sums both over the micro-batches and divides once,
loss = sum_m numerator_m / max(sum_m denominator_m, 1). Each loss declares its ``reduction`` when it registers
(``losses.register(..., reduction=...)``, a name below or a function of its options), and ``weighted_loss``
applies it:

  token_mean     sum_{b,t} l_bt m_bt / sum_{b,t} m_bt                       (TRL bnpo, verl token-mean, SFT)
  sequence_mean  mean over rows with >= 1 token of sum_t l_bt m_bt / sum_t m_bt  (SFT sequence_mean; DPO rows)
  row_mean       mean over every row of sum_t l_bt m_bt / max(sum_t m_bt, 1)     (GRPO paper Eq. 3, TRL loss_type
                                                                             "grpo": an empty row counts 0)
  fixed_length   sum_{b,t} l_bt m_bt / (B * L), L = max_len or T            (Dr. GRPO, Liu et al. 2025)
  custom         the loss returns (numerator, denominator, metrics) itself

A loss of the first four returns ``(loss, metrics)`` where ``loss`` is either its mean (a scalar: the numerator is
the mean times the denominator, max(., 1)-floored as the mean was) or its per-token terms ``[B, T]`` (the
numerator is computed from them). ``aggregate`` (the TRL / verl aggregation modes) is the same table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

CUSTOM = "custom"


@dataclasses.dataclass(frozen=True)
class _Rule:
    per_row: bool  # numerator: the sum of per-row token means (True) or of all masked tokens
    count: Callable  # (mask [B, T], length) -> denominator
    floor_one: bool  # the mean divides by max(denominator, 1)


def _rows_with_tokens(mask, length):
    return jnp.sum((jnp.sum(mask, axis=-1) > 0).astype(mask.dtype))


# the one table of denominators (module docstring)
DENOMINATORS = {
    "token_mean": _Rule(False, lambda mask, length: jnp.sum(mask), True),
    "sequence_mean": _Rule(True, _rows_with_tokens, True),
    "row_mean": _Rule(True, lambda mask, length: jnp.asarray(mask.shape[0], mask.dtype), True),
    "fixed_length": _Rule(
        False,
        lambda mask, length: jnp.asarray(mask.shape[0] * (mask.shape[-1] if length is None else length), mask.dtype),
        False,
    ),
}
REDUCTIONS = (*DENOMINATORS, CUSTOM)


@dataclasses.dataclass(frozen=True)
class Normalisation:
    """A reduction name (``REDUCTIONS``) and, for ``fixed_length``, the length L (None: the mask's T)."""

    name: str
    length: int | None = None

    def __post_init__(self):
        if self.name not in REDUCTIONS:
            raise ValueError(f"reduction={self.name!r}; choose one of {list(REDUCTIONS)}.")


@struct.dataclass
class WeightedLoss:
    """A micro-batch's loss numerator ``total``, its denominator ``count`` and its metrics (scalars)."""

    total: jax.Array
    count: jax.Array
    metrics: dict


def denominator(mask, normalisation: Normalisation):
    """The denominator of ``normalisation`` over ``mask`` [B, T] (in the mask's dtype, not floored)."""
    return DENOMINATORS[normalisation.name].count(mask, normalisation.length)


def numerator(per_token, mask, normalisation: Normalisation):
    """The numerator of ``normalisation`` of a per-token loss [B, T] over ``mask`` [B, T]."""
    masked = per_token * mask
    if DENOMINATORS[normalisation.name].per_row:
        return jnp.sum(jnp.sum(masked, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0))
    return jnp.sum(masked)


def reduce(per_token, mask, normalisation: Normalisation, *, count=None):
    """The mean of a per-token loss: numerator / denominator (``count`` replaces the denominator when given)."""
    mask = mask.astype(per_token.dtype)
    den = denominator(mask, normalisation) if count is None else count
    if DENOMINATORS[normalisation.name].floor_one:
        den = jnp.maximum(den, 1.0)
    return numerator(per_token, mask, normalisation) / den


def weighted_loss(output, mask, normalisation: Normalisation) -> WeightedLoss:
    """A loss's ``output`` on one micro-batch as (numerator, denominator, metrics) for exact accumulation.

    ``output``: ``(mean, metrics)``, ``(per_token [B, T], metrics)`` or, for ``custom``, ``(numerator,
    denominator, metrics)``; ``mask``: the [B, T] tokens (or [B, 1] rows) the mean runs over.
    """
    if normalisation.name == CUSTOM:
        if len(output) != 3:
            raise ValueError("a loss registered with reduction='custom' returns (numerator, denominator, metrics).")
        total, count, metrics = output
        return WeightedLoss(jnp.asarray(total, jnp.float32), jnp.asarray(count, jnp.float32), metrics)
    if len(output) != 2:
        raise ValueError(
            f"a loss with reduction={normalisation.name!r} returns (loss, metrics); one that returns "
            f"(numerator, denominator, metrics) registers with reduction='custom'."
        )
    loss, metrics = output
    mask = jnp.asarray(mask, jnp.float32)
    count = denominator(mask, normalisation)
    if jnp.ndim(loss) == 0:  # the mean: scale it back by its own (floored) denominator
        rule = DENOMINATORS[normalisation.name]
        total = loss * (jnp.maximum(count, 1.0) if rule.floor_one else count)
    else:
        total = numerator(loss, mask.astype(loss.dtype), normalisation)
    return WeightedLoss(total, count, metrics)
