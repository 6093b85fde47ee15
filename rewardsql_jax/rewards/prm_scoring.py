"""Score Chain-of-CTE responses with a trained PRM and aggregate step scores (Reward-SQL Sec. 5.1, 6).

A response's steps are its "\\n\\n"-separated blocks; the PRM input is ``format_prm_input`` of the prompt
and the response; step score = P(" +") against " -" at each step tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rewardsql_jax.models.prm_head import (
    find_tag_positions,
    format_prm_input,
    step_scores,
    step_tag_ids,
    tag_logits_from_hidden,
)
from rewardsql_jax.models.sharding import activation_sharding, model_mesh
from rewardsql_jax.models.shared_prefix import common_prefix_hidden
from rewardsql_jax.sampling.inputs import pad_id, shared_prefix_length

AGGREGATIONS = ("min", "product", "last", "average")
SCORER_BATCH, SCORER_LENGTH_MULTIPLE = 16, 64  # rows per scoring call; row length rounded up to this


def aggregate_steps(scores, how: str = "min") -> float:
    """One score per response from its step scores (Best-of-N selection, paper Sec. 6.3)."""
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; choose one of {list(AGGREGATIONS)}")
    s = np.asarray(scores, np.float64)
    if s.size == 0:
        return 0.0
    pick: dict[str, Callable[[], Any]] = {"min": s.min, "product": s.prod, "last": lambda: s[-1], "average": s.mean}
    return float(pick[how]())


@nnx.jit
def _scores(model, ids, mask, positions, plus, minus):
    return step_scores(model, ids, mask, positions, plus, minus)


@nnx.jit
def _scores_after_prefix(model, prefix, ids, mask, positions, plus, minus):
    """``_scores`` of rows that all begin with ``prefix`` (one question's candidates), the prefix run once;
    ``ids``/``positions`` are each row's tokens after it."""
    hidden, _, _ = common_prefix_hidden(model, prefix, ids, mask)
    return jax.nn.softmax(tag_logits_from_hidden(model, hidden, positions, plus, minus), axis=-1)[..., 0]


class PRMScorer:
    """Batched step scoring with one compiled function per (rows, length, steps) bucket."""

    def __init__(
        self, model, tokenizer, *, batch_size: int = SCORER_BATCH, length_multiple: int = SCORER_LENGTH_MULTIPLE
    ):
        self.model, self.tok = model, tokenizer
        self.tags = step_tag_ids(tokenizer)
        self.mesh = model_mesh(model)
        # a sharded model scores its rows spread over the mesh's data x fsdp devices: a multiple of them per call
        shards = 1 if self.mesh is None else self.mesh.shape["data"] * self.mesh.shape["fsdp"]
        self.row_shards = shards
        self.batch_size, self.length_multiple = -(-batch_size // shards) * shards, length_multiple
        self.pad = pad_id(tokenizer)

    def score(self, prompts, responses) -> list[list[float]]:
        """Step scores per (prompt, response) pair, in input order."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        out = []
        for start in range(0, len(prompts), self.batch_size):
            texts = [
                format_prm_input(p, r)
                for p, r in zip(prompts[start : start + self.batch_size], responses[start : start + self.batch_size])
            ]
            out.extend(self._score_texts(texts))
        return out

    def _score_texts(self, texts):
        enc = [self.tok(t, add_special_tokens=False).input_ids for t in texts]
        # rows that share a long beginning (one question's candidates) with no step tag in it: that part runs once
        shared = shared_prefix_length(enc) if self.row_shards == 1 else 0
        shared = 0 if self.tags.tag_id in enc[0][:shared] else shared
        prefix, enc = enc[0][:shared], [e[shared:] for e in enc]
        n = len(enc)
        # rows rounded up to a multiple of 8 (of the row shards), not to the batch: 8 candidates are not 16 rows
        step = 8 * self.row_shards
        rows = min(self.batch_size, -(-n // step) * step)
        length = max(self.length_multiple, -(-max(map(len, enc)) // self.length_multiple) * self.length_multiple)
        ids = np.full((rows, length), self.pad, np.int32)
        mask = np.zeros((rows, length), np.int32)
        for i, e in enumerate(enc):
            ids[i, : len(e)] = e
            mask[i, : len(e)] = 1
        tags = find_tag_positions(ids, self.tags.tag_id, mask)
        steps = max(8, -(-tags.positions.shape[1] // 8) * 8)
        positions = np.zeros((rows, steps), np.int32)
        positions[:, : tags.positions.shape[1]] = tags.positions
        arrays = (ids, mask, positions)
        if self.mesh is not None:
            rows_sharding = activation_sharding(("batch",), self.mesh)
            arrays = tuple(jax.device_put(x, rows_sharding) for x in arrays)
        tags_ids = (self.tags.plus_id, self.tags.minus_id)
        if shared:
            scores = _scores_after_prefix(self.model, jnp.asarray(prefix, jnp.int32), *arrays, *tags_ids)
        else:
            scores = _scores(self.model, *arrays, *tags_ids)
        scores = np.asarray(jax.device_get(scores))
        return [scores[i, : int(tags.mask[i].sum())].tolist() for i in range(n)]
