"""Pure helpers of the prm stage: rank AUC, question-level split, fixed-shape PRM batches."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rewardsql_jax.stages.prm import balance_examples, prm_arrays, split_by_question, step_auc


def _pairwise_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_step_auc_matches_pair_counting_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        scores = rng.integers(0, 5, n) / 4.0  # many ties
        labels = rng.integers(0, 2, n)
        if labels.min() == labels.max():
            continue
        assert step_auc(scores, labels) == pytest.approx(_pairwise_auc(scores, labels))
    assert step_auc([0.1, 0.9], [0, 1]) == 1.0 and step_auc([0.9, 0.1], [0, 1]) == 0.0
    assert step_auc([0.5, 0.5, 0.5], [1, 0, 1]) == 0.5


def test_step_auc_is_nan_for_a_single_class():
    assert math.isnan(step_auc([0.2, 0.7], [1, 1])) and math.isnan(step_auc([], []))


def test_split_by_question_never_mixes_questions():
    records = [{"question_id": q, "i": i} for q in range(10) for i in range(3)]
    train, held = split_by_question(records, 0.2, seed=0)
    tq, hq = {r["question_id"] for r in train}, {r["question_id"] for r in held}
    assert len(hq) == 2 and not tq & hq and len(train) + len(held) == 30
    assert split_by_question(records, 0.2, seed=0) == (train, held)  # seeded
    assert split_by_question(records, 0.2, seed=1) != (train, held)
    assert len({r["question_id"] for r in split_by_question(records, 0.01, 0)[1]}) == 1  # at least one
    assert len({r["question_id"] for r in split_by_question(records, 0.99, 0)[0]}) == 1  # never all
    one = [{"question_id": 7}] * 3
    assert split_by_question(one, 0.5, 0) == (one, [])


def test_prm_arrays_pads_rows_steps_and_length():
    ex = [([5, 6, 9, 7, 9], [2, 4], [1, 0]), ([5, 9], [1], [1])]
    b = prm_arrays(ex, length=8, num_steps=4, pad_id=0, rows=3).validate()
    assert b.input_ids.shape == (3, 8) and b.tag_positions.shape == (3, 4)
    assert b.attention_mask[0].tolist() == [1] * 5 + [0] * 3 and b.attention_mask[2].sum() == 1
    assert b.tag_positions[0].tolist() == [2, 4, 0, 0] and b.labels[0].tolist() == [1, 0, 0, 0]
    assert b.step_mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]  # padding rows carry no loss


def _examples(label_lists):
    return [([1, 2], [0] * len(y), list(y)) for y in label_lists]


def test_balance_weight_is_neg_over_pos_and_keeps_everything():
    ex = _examples([[1, 0, 0], [0, 0], [0], [1, 1, 0]])  # 3 positive, 6 negative steps
    kept, w, rep = balance_examples(ex, "weight", seed=0)
    assert kept == ex and w == pytest.approx(2.0)
    assert rep["before"] == rep["after"] == {"responses": 4, "positives": 3, "negatives": 6}
    kept, w, rep = balance_examples(ex, "none", seed=0)
    assert kept == ex and w == 1.0 and rep["dropped_responses"] == 0
    kept, w, rep = balance_examples(_examples([[0, 0], [0]]), "weight", seed=0)  # one class: no weight
    assert w == 1.0 and "single class" in rep["note"]


def test_balance_downsample_drops_all_majority_responses_until_even():
    # 3 positive steps; 8 negative steps, 6 of them in all-negative single-step responses
    ex = _examples([[1, 0], [1, 1, 0]] + [[0]] * 6)
    kept, w, rep = balance_examples(ex, "downsample", seed=3)
    assert w == 1.0 and rep["after"] == {"responses": 3, "positives": 3, "negatives": 3}
    assert rep["before"] == {"responses": 8, "positives": 3, "negatives": 8} and rep["dropped_responses"] == 5
    assert ex[0] in kept and ex[1] in kept  # mixed responses are never dropped
    assert balance_examples(ex, "downsample", seed=3) == (kept, w, rep)  # seeded
    # majority in longer all-negative responses: stop before the negatives fall below the positives
    ex = _examples([[1], [1], [1], [0, 0], [0, 0], [0, 0]])
    _, _, rep = balance_examples(ex, "downsample", seed=0)
    assert rep["after"]["positives"] == 3 and rep["after"]["negatives"] == 4 and rep["dropped_responses"] == 1
    # positives as the majority: all-positive responses go
    _, _, rep = balance_examples(_examples([[1, 1], [1], [1], [0]]), "downsample", seed=0)
    assert rep["after"]["negatives"] == 1 and rep["after"]["positives"] in (1, 2)
    with pytest.raises(ValueError, match="balance"):
        balance_examples(ex, "oversample", seed=0)
