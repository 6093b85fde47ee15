"""ModelConfig.attention_impl (Pallas kernels / reference) and remat give the XLA path's logits and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rewardsql_jax.models import ModelConfig, build_model

CFG = ModelConfig(
    model_type="qwen2",
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    attention_bias=True,
)
IDS = np.random.RandomState(0).randint(0, 64, (2, 21))
MASK = np.ones((2, 21), bool)
MASK[1, :6] = False  # left padding


def _loss_and_grad(cfg):
    model = build_model(cfg, seed=1)
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(p):
        logits = nnx.merge(graphdef, p)(IDS, MASK)
        return jnp.sum(jnp.where(MASK[..., None], jax.nn.log_softmax(logits), 0.0)[..., 3]), logits

    (value, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return value, np.asarray(logits), grads


@pytest.mark.parametrize(
    "changes", [dict(attention_impl="reference"), dict(attention_impl="pallas_interpret"), dict(remat=True)]
)
def test_same_logits_and_gradients_as_xla(changes):
    v0, l0, g0 = _loss_and_grad(CFG)
    v1, l1, g1 = _loss_and_grad(CFG.replace(**changes))
    np.testing.assert_allclose(l1[MASK], l0[MASK], atol=1e-5)
    np.testing.assert_allclose(v1, v0, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_unknown_attention_impl_is_a_clear_error():
    with pytest.raises(ValueError, match="attention_impl='flash'"):
        CFG.replace(attention_impl="flash")
