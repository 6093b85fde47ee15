"""Any batch on any mesh: rows that do not divide the data x fsdp devices are padded with masked rows.

A sharded jax.Array needs its row dimension to split evenly over the devices of the mesh's ("data", "fsdp")
axes, so 2 RL prompts cannot run on 4 devices and 48 not on 64 as they are. ``pad_batch`` appends copies of
the last row (finite activations, valid prompt layouts) with every loss mask zeroed, so that each micro-batch
holds its real rows first and its padding last, and the padded batch splits evenly. The train step then keeps
the padding out of the loss in two ways (``families``):

- every loss whose inputs are small per-row arrays (the policy-gradient family, DPO, the PRM loss) receives
  only the real rows (``RealRows.take``: the rows are replicated, then the padding is sliced off), so
  row-averaged losses (``agg="grpo"``, DPO) and their metrics are those of the real rows exactly;
- the supervised losses (SFT, rejection sampling), whose inputs are [B, T, V] logits, see the padded rows
  with an all-zero loss mask: they count masked tokens only, so loss and metrics do not change.

Model forward and backward run on the padded, evenly sharded batch; padding rows get no gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Fields zeroed on padding rows: the loss masks (and per-row values the losses read under those masks).
MASKED_FIELDS = (
    "loss_mask",
    "completion_mask",
    "step_mask",
    "chosen_loss_mask",
    "rejected_loss_mask",
    "advantages",
    "token_rewards",
)


def padded_rows(rows: int, micro_batches: int, shards: int) -> int:
    """Rows of the padded batch: each of the ``micro_batches`` micro-batches rounded up to a multiple of
    ``shards`` (``rows`` must be a multiple of ``micro_batches``)."""
    per_micro = rows // micro_batches
    return micro_batches * (-(-per_micro // shards) * shards)


def pad_batch(batch, micro_batches: int, shards: int):
    """``batch`` padded to ``padded_rows`` rows: copies of its last row appended, ``MASKED_FIELDS`` zero on them;
    ``batch`` itself when nothing is needed. The train step splits rows m, m + M, ... into micro-batch m, so
    appending at the end leaves every micro-batch its real rows first and its padding last."""
    rows = batch.batch_size
    extra = padded_rows(rows, micro_batches, shards) - rows
    if not extra:
        return batch

    def pad(name, x):
        if x is None:
            return None
        xp = jnp if isinstance(x, jax.Array) else np
        tail = xp.repeat(x[-1:], extra, axis=0)
        if name in MASKED_FIELDS:
            tail = xp.zeros_like(tail)
        return xp.concatenate([x, tail])

    return batch.replace(**{f.name: pad(f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch)})


@dataclasses.dataclass(frozen=True)
class RealRows:
    """A (micro-)batch whose first ``count`` rows are real and the rest ``pad_batch`` padding; ``sharding`` is the
    mesh's replicated sharding (the step passes this to the loss families as the option ``real_rows``)."""

    count: int
    sharding: Any

    def take(self, x):
        """The real rows of a per-row array ``[rows, ...]`` (None stays None), replicated first so the slice
        never leaves an uneven shard."""
        if x is None or x.shape[0] == self.count:
            return x
        return jax.lax.with_sharding_constraint(x, self.sharding)[: self.count]
