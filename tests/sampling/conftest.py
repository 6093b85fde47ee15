"""Tiny random transformers Qwen2 models and their weight-identical JAX twins for sampler tests."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from flax import nnx

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.models.registry import config_from_hf, hf_key_table


def tiny_hf_config(**overrides):
    """A ~100k-parameter Qwen2 config. ``initializer_range`` 0.2 spreads the logits so that greedy
    argmax decisions are not near-ties decided by float rounding."""
    from transformers import Qwen2Config

    kw = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.2,
        use_sliding_window=False,
    )
    kw.update(overrides)
    return Qwen2Config(**kw)


def jax_twin(torch_model):
    """The NNX model with ``torch_model``'s exact weights (via the HF key table, in memory)."""
    cfg = config_from_hf(torch_model.config.to_dict())
    model = build_model(cfg)
    graphdef, state = nnx.split(model)
    sd = {k: v.detach().float().numpy() for k, v in torch_model.state_dict().items()}
    flat = dict(nnx.to_flat_state(state))
    for row in hf_key_table(cfg):
        w = sd[row.key]
        flat[row.path].set_value(jnp.asarray(w.T if row.transpose else w))
    return nnx.merge(graphdef, nnx.from_flat_state(list(flat.items())))


@pytest.fixture(scope="session")
def torch_and_jax():
    """(transformers Qwen2ForCausalLM in eval mode, fp32; weight-identical JAX model)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    tm = Qwen2ForCausalLM(tiny_hf_config()).eval()
    return tm, jax_twin(tm)


@pytest.fixture(scope="session")
def tiny_model():
    """A random JAX Qwen2 model (vocab 64) for tests that need no torch reference."""
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        max_position_embeddings=128,
    )
    return build_model(cfg, seed=1)
