"""An online algorithm's update of a rollout batch, and the one place it becomes a train batch."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rewardsql_jax.training.collate import grouped_rl_batch, rl_batch


@dataclasses.dataclass(frozen=True)
class Update:
    """Per-sequence ``advantages`` [B] or per-token ``token_values`` (one [T_i] array per row, aligned with its
    completion tokens) for the batch field the algorithm fills (``OnlineAlgorithm.batch_field``), and the
    per-completion reward the stage logs."""

    rewards: np.ndarray
    advantages: np.ndarray | None = None
    token_values: list | None = None


def train_batch(
    rollouts,
    update: Update,
    *,
    field: str,
    group_size: int,
    length: int,
    pad_id: int,
    completion_length: int | None,
):
    """``GroupedRLBatch`` (each prompt once, left-padded to ``length - completion_length``) when
    ``completion_length`` is given, else ``RLBatch`` rows of ``length``; old log-probs are the sampler's; the
    update's values fill ``field`` (advantages | token_rewards)."""
    ro = rollouts
    if completion_length is None:
        return rl_batch(
            ro.prompt_ids,
            ro.token_ids,
            ro.logprobs,
            length=length,
            pad_id=pad_id,
            advantages=update.advantages,
            token_values=update.token_values,
            field=field,
        )
    return grouped_rl_batch(
        ro.prompt_ids[::group_size],
        ro.token_ids,
        ro.logprobs,
        group=group_size,
        prompt_length=length - completion_length,
        completion_length=completion_length,
        pad_id=pad_id,
        advantages=update.advantages,
        token_values=update.token_values,
        field=field,
    )


def mini_batches(batch, n: int) -> list:
    """``batch`` split along its first axis into ``n`` equal mini-batches, one optimizer step each (the paper's
    GRPO mini-batch: 48 prompts x 8 samples trained in mini-batches of 64; verl ``ppo_mini_batch_size``).

    A ``GroupedRLBatch``'s first axis is prompts; ``RLBatch`` rows are prompt-major groups, so when ``n``
    divides the prompts every mini-batch holds whole groups (their advantages were normalised before).
    """
    rows = jax.tree.leaves(batch)[0].shape[0]
    if n < 1 or rows % n:
        raise ValueError(f"cannot split a batch of {rows} rows into {n} equal mini-batches")
    if n == 1:
        return [batch]
    size = rows // n
    return [jax.tree.map(lambda x, i=i: x[i * size : (i + 1) * size], batch) for i in range(n)]


def mean_metrics(records: list[dict]) -> dict:
    """The train-step metrics of one iteration's optimizer steps, averaged (``loss_is_finite``: all of them)."""
    if len(records) == 1:
        return records[0]
    return {
        k: bool(np.all([r[k] for r in records])) if k == "loss_is_finite" else np.mean([r[k] for r in records], axis=0)
        for k in records[0]
    }
