"""Supervised and PRM rows grouped by a shared prompt prefix, so the train step computes each prefix once.

Text-to-SQL prompts of one database repeat its whole schema; only the question and the target differ. Rows
with the same key (the database) share the longest common token prefix of their prompts, which a
``GroupedSFTBatch`` stores once per group of ``group_size`` rows (``models.shared_prefix``): the same loss and
gradients as the unshared ``SFTBatch`` rows, with the schema's FLOPs divided by the group size. The batch order
draws whole groups of one key; every example is seen once per epoch (a key's last, partial group is filled
with other examples of that key).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from .batch import GroupedPRMBatch, GroupedSFTBatch
from .collate import bucket_length


def shared_prefix_lengths(encoded: Sequence[tuple[list[int], list[int]]], keys: Sequence[Hashable]) -> list[int]:
    """Per example, the length of the longest common token prefix of its key's prompts (the tokens before the
    first loss token of each row), so the prefix never reaches a target token. ``encoded`` holds
    (ids, loss_mask) pairs (``collate.encode_pair``)."""
    if len(encoded) != len(keys):
        raise ValueError(f"{len(encoded)} examples but {len(keys)} keys; give one key per example")
    prompt_len = [m.index(1) if 1 in m else len(m) for _, m in encoded]
    common: dict = {}
    for (ids, _), n, k in zip(encoded, prompt_len, keys):
        row = np.asarray(ids[:n])
        if k not in common:
            common[k] = row
            continue
        ref = common[k][: len(row)]
        diff = np.flatnonzero(ref != row[: len(ref)])
        common[k] = ref[: diff[0]] if diff.size else ref
    out = [len(common[k]) for k in keys]
    empty = sorted({str(k) for k, n in zip(keys, out) if n == 0})
    if empty:
        raise ValueError(f"the prompts of key(s) {empty[:5]} share no first token; they cannot share a prefix")
    return out


def prefix_group_batches(
    keys: Sequence[Hashable], group_size: int, groups_per_batch: int, steps: int, seed: int
) -> list[np.ndarray]:
    """``steps`` index arrays ``[groups_per_batch, group_size]``, each group drawn from one key: per epoch every
    key's examples in a seeded order cut into groups (the last one completed with that key's other examples),
    the groups of all keys shuffled together. Deterministic in its arguments (resume = index by step)."""
    if group_size < 1 or groups_per_batch < 1:
        raise ValueError(f"group_size ({group_size}) and groups_per_batch ({groups_per_batch}) must be >= 1")
    rng = np.random.default_rng(seed)
    by_key: dict = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    members = [np.asarray(v) for v in by_key.values()]
    groups: list[np.ndarray] = []
    while len(groups) < steps * groups_per_batch:
        epoch = []
        for idx in members:
            order = rng.permutation(idx)
            short = -len(order) % group_size
            if short:  # complete the last group with other examples of the same key (with replacement if tiny)
                order = np.concatenate([order, rng.choice(idx, short, replace=short > len(idx))])
            epoch += list(order.reshape(-1, group_size))
        groups += [epoch[j] for j in rng.permutation(len(epoch))]
    stacked = np.stack(groups[: steps * groups_per_batch])
    return list(stacked.reshape(steps, groups_per_batch, group_size))


def _grouped_ids(ids_of, groups: np.ndarray, prefix_lengths, prefix_slots: int, rest_slots: int, pad_id: int):
    """(prompt_ids [P, prefix_slots] left-padded, prompt_mask, rest_ids [P, G, rest_slots] right-padded) of the
    rows ``groups`` [P, G] (indices; ``ids_of(j)`` is row j's token ids), each group's shared prefix once."""
    p, g = groups.shape
    prompt_ids = np.full((p, prefix_slots), pad_id, np.int32)
    prompt_mask = np.zeros((p, prefix_slots), np.int32)
    rest_ids = np.full((p, g, rest_slots), pad_id, np.int32)
    for a, row in enumerate(groups):
        n = prefix_lengths[row[0]]
        if any(prefix_lengths[j] != n for j in row):
            raise ValueError(f"group {a}: rows {row.tolist()} have different shared prefixes; group by one key")
        if n > prefix_slots:
            raise ValueError(f"shared prefix of {n} tokens exceeds prefix_slots={prefix_slots}")
        prompt_ids[a, prefix_slots - n :] = ids_of(row[0])[:n]
        prompt_mask[a, prefix_slots - n :] = 1
        for b, j in enumerate(row):
            rest = len(ids_of(j)) - n
            if rest > rest_slots:
                raise ValueError(f"example {j}: {rest} tokens after the shared prefix exceed rest_slots={rest_slots}")
            rest_ids[a, b, :rest] = ids_of(j)[n:]
    return prompt_ids, prompt_mask, rest_ids


def grouped_sft_batch(
    encoded: Sequence[tuple[list[int], list[int]]],
    groups: np.ndarray,
    prefix_lengths: Sequence[int],
    *,
    prefix_slots: int,
    rest_slots: int,
    pad_id: int,
) -> GroupedSFTBatch:
    """GroupedSFTBatch of the examples ``groups`` [P, G] (indices into ``encoded``): each group's shared prefix
    (``prefix_lengths`` of its rows, equal within a group) left-padded to ``prefix_slots``, each row's rest
    (its own prompt tokens and the target) right-padded to ``rest_slots``."""
    groups = np.asarray(groups)
    prompt_ids, prompt_mask, rest_ids = _grouped_ids(
        lambda j: encoded[j][0], groups, prefix_lengths, prefix_slots, rest_slots, pad_id
    )
    loss_mask = np.zeros(rest_ids.shape, np.int32)
    for a, row in enumerate(groups):
        for b, j in enumerate(row):
            mask = encoded[j][1][prefix_lengths[j] :]
            loss_mask[a, b, : len(mask)] = mask
    return GroupedSFTBatch(prompt_ids, prompt_mask, rest_ids, loss_mask).validate()


def grouped_prm_batch(
    examples: Sequence[tuple],
    groups: np.ndarray,
    prefix_lengths: Sequence[int],
    *,
    prefix_slots: int,
    rest_slots: int,
    num_steps: int,
    pad_id: int,
) -> GroupedPRMBatch:
    """GroupedPRMBatch of the PRM examples ``(ids, tag_positions, labels, ...)`` in ``groups`` [P, G]: the shared
    prefixes (which end before each row's first tag) once per group, the rests right-padded to ``rest_slots``
    (which must leave a slot after every row's last token), the tags moved into the rests' coordinates."""
    groups = np.asarray(groups)
    prompt_ids, prompt_mask, rest_ids = _grouped_ids(
        lambda j: examples[j][0], groups, prefix_lengths, prefix_slots, rest_slots, pad_id
    )
    shape = (*groups.shape, num_steps)
    positions, labels, step_mask = (np.zeros(shape, np.int32) for _ in range(3))
    for a, row in enumerate(groups):
        for b, j in enumerate(row):
            ids, pos, ys = examples[j][:3]
            n = prefix_lengths[j]
            if len(ids) - n >= rest_slots:
                raise ValueError(f"example {j}: rest_slots={rest_slots} leaves no slot after its last token")
            if pos and min(pos) < n:
                raise ValueError(f"example {j}: a step tag lies inside the shared prefix of {n} tokens")
            positions[a, b, : len(pos)] = np.asarray(pos) - n
            labels[a, b, : len(ys)] = ys
            step_mask[a, b, : len(ys)] = 1
    return GroupedPRMBatch(prompt_ids, prompt_mask, rest_ids, positions, labels, step_mask).validate()


def grouped_slots(encoded, prefix_lengths: Sequence[int], multiple: int = 16, spare: int = 0) -> tuple[int, int]:
    """(prefix_slots, rest_slots): the bucketed longest shared prefix and longest rest (plus ``spare`` slots: a PRM
    row needs one after its last tag), one shape per run. ``encoded`` holds tuples whose first item is the ids."""
    prefix = max(prefix_lengths)
    rest = max(len(e[0]) - n for e, n in zip(encoded, prefix_lengths)) + spare
    return bucket_length(prefix, multiple), bucket_length(rest, multiple)
