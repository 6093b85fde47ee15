"""One fresh-Qwen2 builder: the RL pipeline's policy, SQLConductor's models and the planner get one architecture."""

import dataclasses

import jax
import numpy as np
from flax import nnx
from tiny_shapes import tiny_model

from rewardsql_jax.conductor.training.sft import new_model
from rewardsql_jax.models import fresh_config, fresh_model
from rewardsql_jax.planning.from_run import model_config_of
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.policy import new_or_pretrained_policy
from rewardsql_jax.stages.run_config import RunConfig

SHAPE = tiny_model(vocab_size=96, num_heads=4, num_kv_heads=2, max_len=128)


class _Tokenizer:
    """What the builders read of a tokenizer: its length and EOS id."""

    eos_token_id = 3

    def __len__(self):
        return SHAPE.vocab_size


def _params(model):
    return jax.tree.leaves(nnx.state(model, nnx.Param))


def test_every_caller_builds_the_same_fresh_qwen2(tmp_path):
    tok = _Tokenizer()
    config = RunConfig(run_dir=str(tmp_path), model=SHAPE)
    ctx = RunContext(config=config, run_dir=tmp_path, _tokenizer=tok)
    want = fresh_config(SHAPE, len(tok), tok.eos_token_id)
    assert (want.model_type, want.head_dim, want.rope_theta, want.tie_word_embeddings, want.attention_bias) == (
        "qwen2",
        8,
        10000.0,
        True,
        True,
    )
    assert (want.max_position_embeddings, want.eos_token_id, want.vocab_size) == (128, 3, 96)

    policy = new_or_pretrained_policy(ctx)
    conductor = new_model(SHAPE, tok, config.seed)
    assert policy.config == conductor.config == want
    # the planner has no tokenizer: the shape's vocab_size, no EOS id, otherwise the same architecture
    assert model_config_of(config) == dataclasses.replace(want, eos_token_id=None) == fresh_config(SHAPE, 96)
    for a, b in zip(_params(policy), _params(fresh_model(SHAPE, 96, 3, config.seed))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(_params(conductor), _params(policy)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
