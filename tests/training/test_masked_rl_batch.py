"""collate.masked_rl_batch: whole token rows whose trained tokens are marked by a mask (SQLConductor Sec. 4.4)."""

import numpy as np
import pytest

from rewardsql_jax.training.collate import masked_rl_batch


def test_rows_are_right_padded_to_one_bucket_with_their_mask_and_logprobs():
    rows = [([5, 6, 7, 8], [0, 1, 0, 1], [0.0, -0.5, 0.0, -0.25]), ([9, 10], [1, 1], [-1.0, -2.0])]
    batch = masked_rl_batch(rows, [1.0, -1.0], pad_id=0)
    assert batch.input_ids.shape == (2, 64) and batch.input_ids.dtype == np.int32
    np.testing.assert_array_equal(batch.input_ids[0, :5], [5, 6, 7, 8, 0])
    np.testing.assert_array_equal(batch.attention_mask.sum(axis=1), [4, 2])
    np.testing.assert_array_equal(batch.completion_mask[0, :5], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(batch.old_logprobs[1, :3], np.asarray([-1.0, -2.0, 0.0], np.float32))
    np.testing.assert_array_equal(batch.advantages, np.asarray([1.0, -1.0], np.float32))


def test_a_row_whose_fields_differ_in_length_is_refused():
    with pytest.raises(ValueError, match="rows \\[0\\]"):
        masked_rl_batch([([1, 2], [1], [0.0, 0.0])], [0.0], pad_id=0)


def test_per_token_advantages_are_padded_with_the_rows_and_must_match_them():
    rows = [([5, 6, 7], [0, 1, 1], [0.0, -0.5, -0.5]), ([9, 10], [1, 1], [-1.0, -2.0])]
    batch = masked_rl_batch(rows, [[0.0, 0.5, -1.0], [2.0, 2.0]], pad_id=0)
    assert batch.advantages.shape == batch.input_ids.shape and batch.advantages.dtype == np.float32
    np.testing.assert_array_equal(batch.advantages[0, :4], [0.0, 0.5, -1.0, 0.0])
    np.testing.assert_array_equal(batch.advantages[1, :3], [2.0, 2.0, 0.0])
    with pytest.raises(ValueError, match="rows \\[1\\].*per-token advantages"):
        masked_rl_batch(rows, [[0.0, 0.5, -1.0], [2.0]], pad_id=0)
