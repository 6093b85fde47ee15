"""models.vocab.grow_vocab: a pretrained model given room for added tokens, as transformers'
``resize_token_embeddings`` with the new rows set to the old rows' mean (same logits), old tokens' logits unchanged."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from rewardsql_jax.models import from_pretrained, save_pretrained
from rewardsql_jax.models.vocab import grow_vocab

from _hf_tiny import hf_logits, jax_logits, make_hf_model, save_hf_model


@pytest.mark.parametrize("tied", [False, True])
def test_grown_vocab_matches_transformers_resize_with_mean_rows(tmp_path, tied):
    hf = make_hf_model("qwen2", tie_word_embeddings=tied)
    ours = from_pretrained(save_hf_model(hf, tmp_path / "hf"))
    ids = np.array([[1, 5, 127, 9, 3], [7, 2, 8, 8, 1]])
    before = jax_logits(ours, ids)

    grow_vocab(ours, 134)
    hf.resize_token_embeddings(134, mean_resizing=False)
    with torch.no_grad():
        emb = hf.get_input_embeddings().weight
        emb[128:] = emb[:128].mean(0)
        if not tied:
            head = hf.get_output_embeddings().weight  # [V, D]
            head[128:] = head[:128].mean(0)
    assert ours.config.vocab_size == 134 and ours.embed_tokens[...].shape[0] == 134
    with_new = np.array([[1, 130, 127, 133, 3], [128, 2, 8, 8, 131]])
    np.testing.assert_allclose(jax_logits(ours, with_new), hf_logits(hf, with_new), atol=1e-4)
    after = jax_logits(ours, ids)
    np.testing.assert_allclose(after[..., :128], before, atol=1e-5)  # the old tokens' logits are unchanged
    # a new token's logit is the mean of the old ones' (untied: the mean column; tied: h . mean row) -- never favoured
    np.testing.assert_allclose(after[..., 128:], np.repeat(before.mean(-1, keepdims=True), 6, -1), atol=1e-4)

    save_pretrained(ours, tmp_path / "grown")  # and it saves and loads as a model of the new size
    np.testing.assert_allclose(jax_logits(from_pretrained(tmp_path / "grown"), with_new), jax_logits(ours, with_new))


def test_a_vocab_cannot_shrink_and_the_same_size_changes_nothing(tmp_path):
    ours = from_pretrained(save_hf_model(make_hf_model("llama"), tmp_path / "hf"))
    with pytest.raises(ValueError, match="cannot shrink the vocabulary from 128 to 100 tokens"):
        grow_vocab(ours, 100)
    weights = np.asarray(ours.embed_tokens[...])
    assert grow_vocab(ours, 128) is ours
    np.testing.assert_array_equal(np.asarray(ours.embed_tokens[...]), weights)
