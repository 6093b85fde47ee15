"""Fixed-shape RL / preference / SFT batches: token alignment of completions, log-probs and advantages."""

import numpy as np
import pytest

from rewardsql_jax.rl.rollouts import chunk_prompts, pick_questions
from rewardsql_jax.training.collate import (
    ladder_length,
    length_ladder,
    preference_batch,
    rl_batch,
    rl_length,
    sequence_arrays,
    sft_batch,
)


def test_rl_batch_aligns_completion_fields_with_their_tokens():
    prompts = [[5, 6, 7], [8]]
    comps = [[10, 11], [12, 13, 14]]
    lps = [[-0.5, -0.25], [-1.0, -2.0, -3.0]]
    b = rl_batch(
        prompts, comps, lps, length=8, pad_id=0, token_values=[np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])]
    )
    assert b.input_ids.tolist() == [[5, 6, 7, 10, 11, 0, 0, 0], [8, 12, 13, 14, 0, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1] * 5 + [0] * 3, [1] * 4 + [0] * 4]
    assert b.completion_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0]]
    assert b.old_logprobs[0, 3:5].tolist() == [-0.5, -0.25] and b.old_logprobs[1, 1:4].tolist() == [-1, -2, -3]
    assert b.advantages[0].tolist() == [0, 0, 0, 1, 2, 0, 0, 0] and b.advantages[1, 1:4].tolist() == [3, 4, 5]
    assert b.old_logprobs[b.completion_mask == 0].sum() == 0


def test_rl_batch_per_sequence_and_token_rewards():
    b = rl_batch([[1]], [[2, 3]], [[-1.0, -1.0]], length=4, pad_id=9, advantages=[0.7])
    assert b.advantages.shape == (1,) and b.token_rewards is None and b.input_ids[0, 3] == 9
    r = rl_batch(
        [[1]], [[2, 3]], [[-1.0, -1.0]], length=4, pad_id=9, token_values=[np.array([1.5, -0.5])], field="token_rewards"
    )
    assert r.advantages is None and r.token_rewards[0].tolist() == [0, 1.5, -0.5, 0]


def test_rl_batch_errors_are_clear():
    with pytest.raises(ValueError, match="exceed the batch length"):
        rl_batch([[1, 2]], [[3, 4, 5]], [[0.0] * 3], length=4, pad_id=0, advantages=[1.0])
    with pytest.raises(ValueError, match="exactly one"):
        rl_batch([[1]], [[2]], [[0.0]], length=4, pad_id=0)
    with pytest.raises(ValueError, match="one value per completion token"):
        rl_batch([[1]], [[2, 3]], [[0.0, 0.0]], length=4, pad_id=0, token_values=[np.array([1.0])])


def test_preference_and_sft_batches_mask_completions_only():
    p = preference_batch([[1, 2]], [[3]], [[4, 5]], length=6, pad_id=0)
    assert p.chosen_loss_mask.tolist() == [[0, 0, 1, 0, 0, 0]] and p.rejected_loss_mask.tolist() == [[0, 0, 1, 1, 0, 0]]
    assert p.rejected_input_ids.tolist() == [[1, 2, 4, 5, 0, 0]]
    s = sft_batch([[1]], [[2, 3]], length=4, pad_id=0)
    assert s.loss_mask.tolist() == [[0, 1, 1, 0]]
    ids, attn, done = sequence_arrays([[1]], [[]], 2, 0)
    assert done.sum() == 0 and attn.tolist() == [[1, 0]]
    assert rl_length(100, 28) == 128 and rl_length(100, 29) == 192


def test_question_picks_are_seeded_by_step_and_chunks_divide():
    a, b = pick_questions(10, 4, 0, 3), pick_questions(10, 4, 0, 3)
    assert a.tolist() == b.tolist() and len(set(a.tolist())) == 4
    assert pick_questions(10, 4, 0, 4).tolist() != a.tolist()
    assert len(pick_questions(2, 5, 0, 0)) == 5
    assert [chunk_prompts(n) for n in (1, 2, 8, 48, 7)] == [1, 1, 4, 24, 1]


def test_a_length_ladder_holds_every_step_in_at_most_its_levels():
    needs = [100, 120, 130, 700, 90, 110, 1500, 140]
    assert length_ladder(needs, 1) == [1536]  # one length: the longest step's
    two = length_ladder(needs, 2)
    assert two == [192, 1536]  # the median step's (130 tokens, in 64s) and the longest's
    four = length_ladder(needs, 4, multiple=16)
    assert len(four) <= 4 and four[-1] == 1504
    for ladder in (two, four):
        for n in needs:
            fit = ladder_length(n, ladder)
            assert fit >= n and all(x < n for x in ladder if x < fit)  # the shortest that holds it
    assert length_ladder([64] * 5, 3) == [64]  # equal steps: one length whatever the levels
    with pytest.raises(ValueError, match="levels >= 1"):
        length_ladder(needs, 0)
