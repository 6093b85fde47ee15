"""A LoRA model's frozen base held in bf16 (``LoRAConfig.base_dtype``): the adapters stay fp32 and train alone, the
model computes exactly as an fp32 model whose base weights are the bf16-rounded ones, and merging gives an fp32 model
that keeps the whole update (bf16 rounding of ``W + A B`` would lose most of it)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rewardsql_jax.models import LoRAConfig, LoRAParam, add_adapters, merge_adapters, without_adapters
from rewardsql_jax.models.adapters import adapter_state, base_state
from rewardsql_jax.models.config import ModelConfig
from rewardsql_jax.models.registry import build_model
from rewardsql_jax.training.state import create_train_state, merge_model

from _hf_tiny import jax_logits

CFG = ModelConfig(
    model_type="qwen2",
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    attention_bias=True,
)
LORA = LoRAConfig(rank=4, alpha=8.0, targets=("q", "v", "up", "down"))
BF16 = LoRAConfig(rank=4, alpha=8.0, targets=("q", "v", "up", "down"), base_dtype="bfloat16")
IDS = np.random.RandomState(0).randint(0, 96, (2, 12))


def _rounded_fp32_base():
    """The fp32 model whose weights are the bf16-rounded ones of ``build_model(CFG, seed=1)``."""
    model = build_model(CFG, seed=1)
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(jnp.bfloat16).astype(jnp.float32), state))


def _with_random_b(model, seed=2):
    """``model`` with every B drawn N(0, 0.05^2) (fresh adapters start at B = 0 and change nothing)."""
    graphdef, adapters, rest = nnx.split(model, LoRAParam, ...)
    keys = iter(jax.random.split(jax.random.key(seed), 64))
    adapters = jax.tree_util.tree_map_with_path(
        lambda path, x: 0.05 * jax.random.normal(next(keys), x.shape, x.dtype) if path[-2].key == "b" else x, adapters
    )
    return nnx.merge(graphdef, adapters, rest)


def test_the_base_is_stored_in_bf16_and_the_adapters_in_fp32():
    model = add_adapters(build_model(CFG, seed=1), BF16)
    assert model.config.param_dtype == "bfloat16"
    base, adapters = jax.tree.leaves(base_state(model)), jax.tree.leaves(adapter_state(model))
    assert base and all(x.dtype == jnp.bfloat16 for x in base)
    assert adapters and all(x.dtype == jnp.float32 for x in adapters)
    # "" keeps the loaded dtype; an fp32 base stays fp32
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(base_state(add_adapters(build_model(CFG), LORA))))


def test_a_bf16_base_computes_as_the_rounded_weights_in_fp32():
    """Logits and adapter gradients of the bf16-base model equal (bit for bit) those of an fp32 model holding the
    bf16-rounded base weights and the same adapters: bf16 storage changes the weights' precision, nothing else."""
    bf16 = _with_random_b(add_adapters(build_model(CFG, seed=1), BF16))
    ref = _with_random_b(add_adapters(_rounded_fp32_base(), LORA))
    np.testing.assert_array_equal(jax_logits(bf16, IDS), jax_logits(ref, IDS))
    assert np.abs(jax_logits(bf16, IDS) - jax_logits(without_adapters(bf16), IDS)).max() > 1e-2  # the B's matter

    def grads(model):
        state = create_train_state(model, optax.sgd(0.1))
        ids = jnp.asarray(IDS, jnp.int32)

        def loss(params):
            logits = merge_model(state.graphdef, params, state.frozen)(ids)
            return jax.nn.log_softmax(logits.astype(jnp.float32))[:, :-1].sum()

        return state, jax.grad(loss)(state.params)

    (s_bf16, g_bf16), (_, g_ref) = grads(bf16), grads(ref)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(s_bf16.frozen))  # the train state's base
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(s_bf16.opt_state) if x.ndim)
    for a, b in zip(jax.tree.leaves(g_bf16), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_array_equal(a, b)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(g_bf16)) > 0


def test_merging_a_bf16_base_gives_fp32_weights_with_the_whole_update():
    model = _with_random_b(add_adapters(build_model(CFG, seed=1), BF16))
    merged = merge_adapters(model)
    assert merged.config.param_dtype == "float32"
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(merged)))
    np.testing.assert_allclose(jax_logits(merged, IDS), jax_logits(model, IDS), atol=1e-5)
    proj = model.layers[0].self_attn.q_proj
    update = np.asarray(merged.layers[0].self_attn.q_proj.kernel[...]) - np.asarray(proj.kernel[...], np.float32)
    np.testing.assert_allclose(
        update, LORA.scale * np.asarray(proj.lora.a[...]) @ np.asarray(proj.lora.b[...]), atol=1e-6
    )
