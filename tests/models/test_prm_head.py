"""Reward-SQL PRM scoring: tag ids from the tokenizer, tag positions, 2-column logits == full-logits softmax."""

import jax
import numpy as np
import pytest

from rewardsql_jax.data import train_bpe_tokenizer
from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.models.prm_head import (
    find_tag_positions,
    format_prm_input,
    prm_tag_logits,
    step_scores,
    step_tag_ids,
)

PROMPT = "You are now a sqlite data analyst.\nQuestion: how many singers?\n"
RESPONSE = "WITH a AS (SELECT id FROM singer),\n\nb AS (SELECT COUNT(*) AS n FROM a)\n\nSELECT n FROM b"
TEXTS = [PROMPT, RESPONSE, "SELECT name FROM singer WHERE age > 20", "WITH x AS (SELECT 1) SELECT * FROM x"] * 3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_bpe_tokenizer(TEXTS, vocab_size=300, save_dir=tmp_path_factory.mktemp("tok"))


def _model(tie, seed=0):
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        tie_word_embeddings=tie,
    )
    return build_model(cfg, seed=seed)


def test_format_prm_input_replaces_step_breaks_and_appends_tag():
    text = format_prm_input(PROMPT, RESPONSE)
    assert text == PROMPT + (
        "WITH a AS (SELECT id FROM singer), и b AS (SELECT COUNT(*) AS n FROM a) и SELECT n FROM b и"
    )
    assert "\n\n" not in text[len(PROMPT) :]
    assert format_prm_input("p:", "SELECT 1\n\n") == "p:SELECT 1 и"
    assert format_prm_input("p:", "SELECT 1", tag=" <s>") == "p:SELECT 1 <s>"


def test_step_tag_ids_from_tokenizer(tokenizer):
    tags = step_tag_ids(tokenizer)
    tag, plus, minus = tags
    assert tokenizer.decode([tag]) == " и"
    assert tokenizer.decode([plus]) == " +" and tokenizer.decode([minus]) == " -"
    assert len({tag, plus, minus}) == 3


def test_step_tag_ids_rejects_multi_token_strings(tokenizer):
    with pytest.raises(ValueError, match="step tag ' zzqx' must be exactly one token"):
        step_tag_ids(tokenizer, tag=" zzqx")
    with pytest.raises(ValueError, match="'-' label"):
        step_tag_ids(tokenizer, minus=" minus!?")


def test_find_tag_positions_matches_tags_in_text(tokenizer):
    tag = step_tag_ids(tokenizer).tag_id
    rows = [
        tokenizer.encode(format_prm_input(PROMPT, RESPONSE)),
        tokenizer.encode(format_prm_input(PROMPT, "SELECT 1")),
    ]
    t = max(map(len, rows))
    ids = np.zeros((2, t), np.int32)
    mask = np.zeros((2, t), bool)
    for i, r in enumerate(rows):  # left padding, pad id == tag id to check the mask is honoured
        ids[i, :] = tag
        ids[i, t - len(r) :] = r
        mask[i, t - len(r) :] = True
    found = find_tag_positions(ids, tag, attention_mask=mask)
    assert found.positions.shape == (2, 3)
    np.testing.assert_array_equal(found.mask, [[True, True, True], [True, False, False]])
    for i in range(2):
        pos = found.positions[i][found.mask[i]]
        assert all(ids[i, p] == tag for p in pos)
        assert pos[-1] == t - 1  # the final tag is the last token
    assert find_tag_positions(ids, tag, attention_mask=mask, max_steps=5).positions.shape == (2, 5)
    with pytest.raises(ValueError, match="max_steps"):
        find_tag_positions(ids, tag, attention_mask=mask, max_steps=2)


@pytest.mark.parametrize("tie", [False, True])
def test_tag_logits_equal_full_logits_columns(tokenizer, tie):
    model = _model(tie)
    _, plus, minus = step_tag_ids(tokenizer)
    rng = np.random.RandomState(0)
    ids = rng.randint(0, 300, (3, 14)).astype(np.int32)
    mask = np.ones_like(ids, bool)
    mask[1, :4] = False
    positions = np.array([[2, 7, 13], [5, 9, 13], [0, 1, 12]], np.int32)
    got = np.asarray(prm_tag_logits(model, ids, mask, positions, plus, minus))
    full = np.asarray(model(ids, mask))
    expect = np.stack([full[np.arange(3)[:, None], positions, plus], full[np.arange(3)[:, None], positions, minus]], -1)
    assert got.shape == (3, 3, 2)
    np.testing.assert_allclose(got, expect, atol=1e-6, rtol=1e-6)
    scores = np.asarray(step_scores(model, ids, mask, positions, plus, minus))
    np.testing.assert_allclose(scores, np.asarray(jax.nn.softmax(expect, axis=-1))[..., 0], atol=1e-6)
    assert ((scores > 0) & (scores < 1)).all()


def test_scores_respond_to_label_columns(tokenizer):
    """Swapping plus/minus turns p into 1 - p (the '+' column is the one taken)."""
    model = _model(False, seed=3)
    _, plus, minus = step_tag_ids(tokenizer)
    ids = np.arange(10, dtype=np.int32)[None]
    pos = np.array([[3, 9]], np.int32)
    a = np.asarray(step_scores(model, ids, None, pos, plus, minus))
    b = np.asarray(step_scores(model, ids, None, pos, minus, plus))
    np.testing.assert_allclose(a + b, 1.0, atol=1e-6)
    assert not np.allclose(a, 0.5, atol=1e-6)


def test_bad_positions_shape(tokenizer):
    with pytest.raises(ValueError, match="positions must be"):
        prm_tag_logits(_model(False), np.zeros((2, 5), np.int32), None, np.zeros((5,), np.int32), 1, 2)
