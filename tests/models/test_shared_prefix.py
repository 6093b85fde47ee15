"""models.shared_prefix: a common prefix computed once gives the hidden states of the whole rows."""

import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.models.shared_prefix import common_prefix_hidden


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(
        model_type="llama",
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
    )
    return build_model(cfg)


@pytest.mark.parametrize("side", ["left", "right"])
def test_common_prefix_hidden_equals_the_whole_rows(model, side):
    rng = np.random.default_rng(0)
    prefix = rng.integers(1, 96, size=40)
    tails = [rng.integers(1, 96, size=n) for n in (3, 9, 6)]
    width = 12
    ids, mask = np.zeros((3, width), np.int32), np.zeros((3, width), bool)
    for r, t in enumerate(tails):
        where = slice(width - len(t), width) if side == "left" else slice(0, len(t))
        ids[r, where], mask[r, where] = t, True
    hidden, head, rows = common_prefix_hidden(model, jnp.asarray(prefix), jnp.asarray(ids), jnp.asarray(mask))
    assert head.k[0].shape == (1, 2, 40, 8) and rows.k[0].shape == (3, 2, width, 8)
    for r, t in enumerate(tails):
        whole = np.concatenate([prefix, t])[None]
        ref = np.asarray(model.hidden_states(jnp.asarray(whole), jnp.ones_like(whole, bool)))[0, 40:]
        got = np.asarray(hidden[r])[mask[r]]
        np.testing.assert_allclose(got, ref, atol=2e-5)
