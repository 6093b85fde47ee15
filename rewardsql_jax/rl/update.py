"""An online algorithm's update of a rollout batch, and the one place it becomes a train batch."""

from __future__ import annotations

import dataclasses

import numpy as np

from rewardsql_jax.training.collate import grouped_rl_batch, rl_batch


@dataclasses.dataclass(frozen=True)
class Update:
    """Per-sequence ``advantages`` [B] or per-token ``token_values`` (one [T_i] array per row, aligned with its
    completion tokens) for the batch field ``field``, and the per-completion reward the stage logs."""

    rewards: np.ndarray
    advantages: np.ndarray | None = None
    token_values: list | None = None
    field: str = "advantages"


def train_batch(rollouts, update: Update, *, group_size: int, length: int, pad_id: int, completion_length: int | None):
    """``GroupedRLBatch`` (each prompt once, left-padded to ``length - completion_length``) when
    ``completion_length`` is given, else ``RLBatch`` rows of ``length``; old log-probs are the sampler's."""
    values = dict(advantages=update.advantages, token_values=update.token_values, field=update.field)
    ro = rollouts
    if completion_length is None:
        return rl_batch(ro.prompt_ids, ro.token_ids, ro.logprobs, length=length, pad_id=pad_id, **values)
    return grouped_rl_batch(
        ro.prompt_ids[::group_size],
        ro.token_ids,
        ro.logprobs,
        group=group_size,
        prompt_length=length - completion_length,
        completion_length=completion_length,
        pad_id=pad_id,
        **values,
    )
