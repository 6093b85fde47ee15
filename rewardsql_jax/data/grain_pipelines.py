"""Grain pipelines that turn tokenized records into fixed-shape training batches.

Every pipeline is a ``grain.MapDataset`` whose element i is batch i of the run, built from a deterministic
batch plan: per epoch, one global permutation seeded by (seed, epoch), strided over hosts
(``shard_index::shard_count``, disjoint, equal sizes), optionally sorted by length inside windows of
``group_by_length`` batches (then the batch order is shuffled again), cut into ``batch_size`` rows and
right-padded to the smallest bucket length that fits (prompts for generation are left-padded). Iterate with
``ds.to_iter_dataset()``; that iterator's ``get_state()``/``set_state()`` is what ``training.checkpoint``
saves, so a resumed run sees exactly the batches it would have seen.

Records (plain dicts of int lists):
  sft         {"prompt_ids", "target_ids"}                    -> SFTBatch (loss on the target)
  prm         {"input_ids", "tag_positions", "labels"}         -> PRMBatch
  preference  {"prompt_ids", "chosen_ids", "rejected_ids"}     -> PreferenceBatch
  prompts     {"prompt_ids"}                                   -> PromptBatch (left-padded, record index kept)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import grain
import jax
import numpy as np
from flax import struct

from rewardsql_jax.training.batch import PRMBatch, PreferenceBatch, SFTBatch


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Batching options shared by every pipeline.

    buckets: allowed padded lengths (ascending); records longer than the last one are dropped and counted.
    group_by_length: 0 = off; k > 0 sorts each window of k batches by length before cutting batches.
    num_epochs: None repeats forever (each epoch reshuffled). shard_index / shard_count default to
    ``jax.process_index()`` / ``jax.process_count()``.
    """

    batch_size: int
    seed: int = 0
    shuffle: bool = True
    num_epochs: int | None = 1
    buckets: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    group_by_length: int = 0
    pad_id: int = 0
    shard_index: int | None = None
    shard_count: int | None = None

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}.")
        if not self.buckets or list(self.buckets) != sorted(set(self.buckets)) or self.buckets[0] < 1:
            raise ValueError(f"buckets must be strictly increasing positive lengths, got {self.buckets}.")
        if self.num_epochs is not None and self.num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1 or None (forever), got {self.num_epochs}.")
        if self.group_by_length < 0:
            raise ValueError(f"group_by_length must be >= 0 batches, got {self.group_by_length}.")
        count = self.shard_count if self.shard_count is not None else None
        if count is not None and count < 1:
            raise ValueError(f"shard_count must be >= 1, got {count}.")
        if self.shard_index is not None and count is not None and not 0 <= self.shard_index < count:
            raise ValueError(f"shard_index must be in [0, {count}), got {self.shard_index}.")

    def shard(self) -> tuple[int, int]:
        """(shard_index, shard_count), defaulting to this JAX process."""
        count = jax.process_count() if self.shard_count is None else self.shard_count
        index = jax.process_index() if self.shard_index is None else self.shard_index
        return index, count


@struct.dataclass
class PromptBatch:
    """Left-padded prompts for the sampler, with ``index`` [B] pointing back to the source records."""

    input_ids: Any
    attention_mask: Any
    index: Any


class BatchPlan:
    """Which record indices form batch j of epoch e on this shard (deterministic, cached per epoch)."""

    def __init__(self, lengths: Sequence[int], cfg: PipelineConfig):
        self.cfg = cfg
        self.lengths = np.asarray(lengths, np.int64)
        self.valid = np.flatnonzero(self.lengths <= cfg.buckets[-1])
        self.num_dropped = len(self.lengths) - len(self.valid)
        self.shard_index, self.shard_count = cfg.shard()
        self.per_shard = len(self.valid) // self.shard_count
        self.num_batches = self.per_shard // cfg.batch_size
        if self.num_batches == 0:
            raise ValueError(
                f"{len(self.valid)} usable records ({self.num_dropped} longer than the largest bucket "
                f"{cfg.buckets[-1]}) over {self.shard_count} shards give no full batch of "
                f"{cfg.batch_size}; add data, lower batch_size or add a larger bucket."
            )
        self._epochs: dict[int, np.ndarray] = {}  # the last two epochs' batches (an epoch boundary needs both)

    def epoch(self, epoch: int) -> np.ndarray:
        """[num_batches, batch_size] record indices of ``epoch`` on this shard."""
        if epoch not in self._epochs:
            if len(self._epochs) == 2:
                del self._epochs[next(iter(self._epochs))]
            self._epochs[epoch] = self._batches(epoch)
        return self._epochs[epoch]

    def _batches(self, epoch: int) -> np.ndarray:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, epoch])
        order = rng.permutation(self.valid) if cfg.shuffle else self.valid
        local = order[self.shard_index :: self.shard_count][: self.per_shard]
        local = local[: self.num_batches * cfg.batch_size]
        if cfg.group_by_length:
            window = cfg.group_by_length * cfg.batch_size
            local = np.concatenate(
                [
                    c[np.argsort(self.lengths[c], kind="stable")]
                    for c in np.split(local, range(window, len(local), window))
                ]
            )
        batches = local.reshape(self.num_batches, cfg.batch_size)
        if cfg.group_by_length and cfg.shuffle:
            batches = batches[rng.permutation(self.num_batches)]
        return batches


def smallest_bucket(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= n."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"length {n} exceeds the largest bucket {buckets[-1]}.")


def _pad(rows: Sequence[Sequence[int]], width: int, pad_id: int, *, left: bool = False):
    ids = np.full((len(rows), width), pad_id, np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], mask[i, sl] = r, 1
    return ids, mask


def collate_sft(records, cfg: PipelineConfig, indices=None) -> SFTBatch:
    """prompt + target, right-padded to a bucket; loss_mask = 1 on the target tokens."""
    rows = [list(r["prompt_ids"]) + list(r["target_ids"]) for r in records]
    ids, attn = _pad(rows, smallest_bucket(max(map(len, rows)), cfg.buckets), cfg.pad_id)
    loss = np.zeros(ids.shape, np.float32)
    for i, r in enumerate(records):
        loss[i, len(r["prompt_ids"]) : len(rows[i])] = 1.0
    return SFTBatch(ids, attn, loss)


def collate_preference(records, cfg: PipelineConfig, indices=None) -> PreferenceBatch:
    """Chosen and rejected completions of each prompt, both padded to one bucket covering the longer."""
    chosen = [list(r["prompt_ids"]) + list(r["chosen_ids"]) for r in records]
    rejected = [list(r["prompt_ids"]) + list(r["rejected_ids"]) for r in records]
    width = smallest_bucket(max(map(len, chosen + rejected)), cfg.buckets)
    out = []
    for rows in (chosen, rejected):
        ids, attn = _pad(rows, width, cfg.pad_id)
        loss = np.zeros(ids.shape, np.float32)
        for i, r in enumerate(records):
            loss[i, len(r["prompt_ids"]) : len(rows[i])] = 1.0
        out += [ids, attn, loss]
    return PreferenceBatch(*out)


def collate_prm(records, cfg: PipelineConfig, indices=None, *, max_steps: int = 32) -> PRMBatch:
    """Token ids padded to a bucket; step tags padded to the next power of two (<= max_steps)."""
    rows = [list(r["input_ids"]) for r in records]
    ids, attn = _pad(rows, smallest_bucket(max(map(len, rows)), cfg.buckets), cfg.pad_id)
    steps = max(len(r["tag_positions"]) for r in records)
    s = min(max_steps, 1 << max(steps - 1, 0).bit_length())
    pos, labels, mask = (np.zeros((len(records), s), dt) for dt in (np.int32, np.float32, np.float32))
    for i, r in enumerate(records):
        n = len(r["tag_positions"])
        pos[i, :n], labels[i, :n], mask[i, :n] = r["tag_positions"], r["labels"], 1.0
    return PRMBatch(ids, attn, pos, labels, mask)


def collate_prompts(records, cfg: PipelineConfig, indices) -> PromptBatch:
    """Prompts left-padded to a bucket (generation appends on the right); ``index`` = record indices."""
    rows = [list(r["prompt_ids"]) for r in records]
    ids, attn = _pad(rows, smallest_bucket(max(map(len, rows)), cfg.buckets), cfg.pad_id, left=True)
    return PromptBatch(ids, attn, np.asarray(indices, np.int64))


class _LoadBatch:
    """Picklable ``map_with_index`` function (grain worker processes can run it): batch index -> batch."""

    def __init__(self, records, plan: BatchPlan, collate: Callable):
        self.records, self.plan, self.collate = records, plan, collate

    def __call__(self, index, j):
        idx = self.plan.epoch(index // self.plan.num_batches)[j]
        return self.collate([self.records[i] for i in idx], self.plan.cfg, idx)


def _dataset(records, lengths, cfg: PipelineConfig, collate: Callable) -> grain.MapDataset:
    plan = BatchPlan(lengths, cfg)
    ds = grain.MapDataset.range(plan.num_batches).repeat(cfg.num_epochs)
    ds = ds.map_with_index(_LoadBatch(list(records), plan, collate))
    ds.plan = plan  # num_batches (per epoch) and num_dropped, for callers and tests
    return ds


def _require(records, keys, kind):
    if not records:
        raise ValueError(f"{kind}: no records given.")
    missing = [k for k in keys if k not in records[0]]
    if missing:
        raise ValueError(f"{kind} records need keys {list(keys)}; the first record lacks {missing}.")


def sft_dataset(records: Sequence[dict], cfg: PipelineConfig) -> grain.MapDataset:
    """SFT pairs -> SFTBatch per element (see module docstring)."""
    _require(records, ("prompt_ids", "target_ids"), "sft")
    lengths = [len(r["prompt_ids"]) + len(r["target_ids"]) for r in records]
    return _dataset(records, lengths, cfg, collate_sft)


def preference_dataset(records: Sequence[dict], cfg: PipelineConfig) -> grain.MapDataset:
    """Preference pairs -> PreferenceBatch per element."""
    _require(records, ("prompt_ids", "chosen_ids", "rejected_ids"), "preference")
    lengths = [len(r["prompt_ids"]) + max(len(r["chosen_ids"]), len(r["rejected_ids"])) for r in records]
    return _dataset(records, lengths, cfg, collate_preference)


def prm_dataset(records: Sequence[dict], cfg: PipelineConfig, *, max_steps: int = 32) -> grain.MapDataset:
    """Step-labelled PRM inputs -> PRMBatch per element; records with more than ``max_steps`` tags are dropped."""
    _require(records, ("input_ids", "tag_positions", "labels"), "prm")
    big = cfg.buckets[-1] + 1
    lengths = [len(r["input_ids"]) if len(r["tag_positions"]) <= max_steps else big for r in records]
    return _dataset(records, lengths, cfg, functools.partial(collate_prm, max_steps=max_steps))


def prompt_dataset(records: Sequence[dict], cfg: PipelineConfig) -> grain.MapDataset:
    """RL prompts -> PromptBatch per element (left-padded)."""
    _require(records, ("prompt_ids",), "prompts")
    lengths = [len(r["prompt_ids"]) for r in records]
    return _dataset(records, lengths, cfg, collate_prompts)


def padding_fraction(batches) -> float:
    """Share of padded token slots over ``batches`` (anything with an ``attention_mask`` / chosen mask)."""
    real = total = 0
    for b in batches:
        masks = (
            [b.chosen_attention_mask, b.rejected_attention_mask]
            if isinstance(b, PreferenceBatch)
            else [b.attention_mask]
        )
        for m in masks:
            real += int(np.sum(m))
            total += int(np.size(m))
    return 1.0 - real / max(total, 1)
