"""Mini-batches of a rollout batch: whole prompt groups per optimizer step, and their metrics averaged."""

import numpy as np
import pytest

from rewardsql_jax.rl.batches import mean_metrics, mini_batches
from rewardsql_jax.training.batch import GroupedRLBatch, RLBatch


def test_grouped_batch_splits_by_prompt():
    p, g, lc = 4, 3, 5
    b = GroupedRLBatch(
        prompt_ids=np.arange(p * 2).reshape(p, 2),
        prompt_mask=np.ones((p, 2), np.int32),
        completion_ids=np.arange(p * g * lc).reshape(p, g, lc),
        completion_mask=np.ones((p, g, lc), np.int32),
        old_logprobs=np.zeros((p, g, lc), np.float32),
        advantages=np.arange(p * g, dtype=np.float32).reshape(p, g),
    )
    parts = mini_batches(b, 2)
    assert len(parts) == 2 and all(isinstance(x, GroupedRLBatch) for x in parts)
    np.testing.assert_array_equal(parts[1].prompt_ids, b.prompt_ids[2:])
    np.testing.assert_array_equal(parts[1].completion_ids, b.completion_ids[2:])
    np.testing.assert_array_equal(parts[0].advantages, b.advantages[:2])
    assert parts[0].ref_logprobs is None  # absent fields stay absent
    assert mini_batches(b, 1) == [b]


def test_row_batch_splits_into_contiguous_groups_and_refuses_uneven_splits():
    rows, t = 6, 4
    b = RLBatch(
        input_ids=np.arange(rows * t).reshape(rows, t),
        attention_mask=np.ones((rows, t), np.int32),
        completion_mask=np.ones((rows, t), np.int32),
        advantages=np.arange(rows, dtype=np.float32),
    )
    parts = mini_batches(b, 3)
    np.testing.assert_array_equal(np.concatenate([x.advantages for x in parts]), b.advantages)
    np.testing.assert_array_equal(parts[2].input_ids, b.input_ids[4:])
    with pytest.raises(ValueError, match="6 rows into 4 equal mini-batches"):
        mini_batches(b, 4)


def test_mean_metrics_average_and_finite_flag_needs_every_step():
    m = mean_metrics([{"loss": 1.0, "loss_is_finite": True}, {"loss": 3.0, "loss_is_finite": False}])
    assert m["loss"] == 2.0 and m["loss_is_finite"] is False
    one = {"loss": 5.0, "loss_is_finite": True}
    assert mean_metrics([one]) is one
