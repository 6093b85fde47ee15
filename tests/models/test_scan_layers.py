"""``ModelConfig.scan_layers``: the layers of a full-sequence pass as one ``lax.scan`` give what the unrolled layers
give (hidden states, gradients, the prefix-shared passes, the sampler's tokens), and compile one layer."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.models.lora import TARGETS, LoRA, LoRAConfig
from rewardsql_jax.models.shared_prefix import common_prefix_hidden, shared_prefix_hidden
from rewardsql_jax.sampling.sampler import generate


def _config(**overrides) -> ModelConfig:
    kw = dict(
        model_type="qwen2",
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        max_position_embeddings=256,
    )
    return ModelConfig(**(kw | overrides))


def _pair(**overrides):
    """The same weights run unrolled and scanned."""
    unrolled = build_model(_config(**overrides), seed=0)
    graphdef, state = nnx.split(unrolled)
    scanned = nnx.merge(graphdef, state)
    scanned.config = dataclasses.replace(scanned.config, scan_layers=True)
    return unrolled, scanned


def _rows(seed=0, b=3, t=10):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 96, (b, t)).astype(np.int32)
    mask = np.ones((b, t), bool)
    mask[0, :3] = False  # left padding
    mask[1, -2:] = False  # right padding
    return jnp.asarray(ids), jnp.asarray(mask)


@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.parametrize("lora", [False, True])
def test_scanned_layers_give_the_unrolled_hidden_states_and_gradients(remat, lora):
    adapters = LoRAConfig(rank=4, targets=TARGETS) if lora else LoRAConfig()
    unrolled, scanned = _pair(remat=remat, lora=adapters)
    ids, mask = _rows()

    def loss(model):
        return jnp.sum(model.hidden_states(ids, mask) ** 2 * mask[..., None])

    values, grads = [], []
    for model in (unrolled, scanned):
        value, grad = nnx.value_and_grad(loss)(model)
        values.append(value)
        grads.append(grad)
    np.testing.assert_allclose(values[1], values[0], rtol=1e-5)
    np.testing.assert_allclose(scanned.hidden_states(ids, mask), unrolled.hidden_states(ids, mask), atol=1e-5)
    # fp32 summation order: relative to each gradient's largest entry, as far as jitting the unrolled layers moves
    # them from their eager values (~1e-5 to 9e-5 here, measured)
    for g_scan, g_unrolled in zip(jax.tree.leaves(grads[1]), jax.tree.leaves(grads[0]), strict=True):
        g_scan, g_unrolled = np.asarray(g_scan), np.asarray(g_unrolled)
        assert np.abs(g_scan - g_unrolled).max() <= 2e-4 * np.abs(g_unrolled).max()
    # every layer has its own gradient (the scan's stacked weights send each layer's back to it)
    layers = grads[1]["layers"]
    assert all(sum(np.abs(np.asarray(g)).sum() for g in jax.tree.leaves(layers[i])) > 0 for i in range(3))


def test_scanned_prefix_shared_passes_equal_the_unrolled_ones():
    unrolled, scanned = _pair()
    rng = np.random.default_rng(1)
    prompt_ids, prompt_mask = _rows(1, b=2, t=7)
    prompt_mask = jnp.asarray(np.concatenate([np.zeros((2, 2), bool), np.ones((2, 5), bool)], axis=1))
    completions = jnp.asarray(rng.integers(1, 96, (2, 3, 5)).astype(np.int32))
    got = shared_prefix_hidden(scanned, prompt_ids, prompt_mask, completions)
    ref = shared_prefix_hidden(unrolled, prompt_ids, prompt_mask, completions)
    np.testing.assert_allclose(got, ref, atol=1e-5)

    prefix = jnp.asarray(rng.integers(1, 96, 12).astype(np.int32))
    ids, mask = _rows(2, b=3, t=6)
    for got, ref in zip(
        jax.tree.leaves(common_prefix_hidden(scanned, prefix, ids, mask)),
        jax.tree.leaves(common_prefix_hidden(unrolled, prefix, ids, mask)),
        strict=True,
    ):
        np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_the_sampler_draws_the_same_tokens_with_scanned_prefill(share_prefix):
    unrolled, scanned = _pair()
    common = list(range(1, 40))
    prompts = [common + [41, 42, 43], common + [50, 51], common + [60]]
    kw = dict(max_new_tokens=6, temperature=0.8, num_samples=2, seed=3, share_prefix=share_prefix)
    got, ref = generate(scanned, prompts, **kw), generate(unrolled, prompts, **kw)
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=1e-5)


def test_a_scanned_pass_compiles_one_layer():
    """The lowered program of a scanned pass holds one layer's matmuls, the unrolled one every layer's."""
    unrolled, scanned = _pair(num_hidden_layers=6)
    ids, mask = _rows()

    def dots(model):
        graphdef, state = nnx.split(model)
        text = jax.jit(lambda s: nnx.merge(graphdef, s).hidden_states(ids, mask)).lower(state).as_text()
        return text.count("dot_general")

    assert dots(unrolled) >= 6 * 7  # q, k, v, o, gate, up, down in each of the 6 layers
    assert dots(scanned) < 2 * 7


def test_scanned_layers_drop_the_same_adapter_inputs():
    """LoRA dropout in a train step: each layer's adapters keep their own keys inside the scan."""
    from rewardsql_jax.models.adapters import dropout_on

    adapters = LoRAConfig(rank=4, targets=TARGETS, dropout=0.5)
    unrolled, scanned = _pair(lora=adapters)
    for model in (unrolled, scanned):
        for layer in model.layers:  # B != 0, so that the adapters (and their dropout) change the output
            for _, node in nnx.iter_graph(layer):
                if isinstance(node, LoRA):
                    node.b.value = jnp.full(node.b.value.shape, 0.3)
        dropout_on(model, jax.random.key(7))
    ids, mask = _rows()
    ref = np.asarray(unrolled.hidden_states(ids, mask))
    same_keys = np.abs(np.asarray(scanned.hidden_states(ids, mask)) - ref).max()
    dropout_on(unrolled, jax.random.key(8))
    other_keys = np.abs(np.asarray(unrolled.hidden_states(ids, mask)) - ref).max()
    assert same_keys < 1e-4 * np.abs(ref).max() < other_keys / 100  # fp32 summation order vs other masks
