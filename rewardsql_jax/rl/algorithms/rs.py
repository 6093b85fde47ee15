"""Rejection sampling (Reward-SQL Sec. 5.2): SFT on D_filtered = {C_i : R_i > tau}, tau =
``rl.algorithm_options.threshold``. ``losses.rs`` applies that filter inside a fixed batch of all candidates;
filtering on the host and training the ``sft`` loss on the kept ones is the same objective without spending
compute on rejected rows."""

from __future__ import annotations

import dataclasses

from rewardsql_jax.training.batch import SFTBatch
from rewardsql_jax.training.collate import sft_batch

from ..algorithm import OfflineAlgorithm, register_algorithm


def rs_kept(candidates: list[dict], threshold: float) -> list[dict]:
    """D_filtered of Sec. 5.2: candidates with R > tau."""
    return [c for c in candidates if c["reward"] > threshold]


@dataclasses.dataclass(frozen=True)
class RSOptions:
    """``rl.algorithm_options`` of ``rs``: ``threshold`` tau; a candidate is kept when its R = PR + OR > tau."""

    threshold: float = 1.5


@register_algorithm
class RejectionSampling(OfflineAlgorithm):
    name = "rs"
    loss = "sft"
    batch_type = SFTBatch
    options_type = RSOptions
    moved_settings = {"rs_threshold": "threshold"}

    def select(self, candidates, rl):
        return rs_kept(candidates, self.options(rl).threshold)

    def batch(self, items, *, length, pad_id):
        return sft_batch(
            [c["prompt_ids"] for c in items], [c["token_ids"] for c in items], length=length, pad_id=pad_id
        )

    def summary(self, items, candidates) -> dict:
        return {"kept": len(items), "kept_fraction": len(items) / max(len(candidates), 1)}
