"""Token log-probs: alignment, temperature, fp32, and the chunked (memory-bounded) path with its gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rewardsql_jax.training.logprobs import sequence_logprobs, summed_logprobs, target_logprobs

from _train_tiny import sft_batch, tiny_state


def test_target_logprobs_is_log_softmax_at_the_target():
    logits = jax.random.normal(jax.random.key(0), (3, 5, 11)).astype(jnp.bfloat16)
    targets = jnp.array([[1, 2, 3, 4, 5], [0, 0, 10, 10, 3], [7, 8, 9, 1, 2]])
    got = target_logprobs(logits, targets, temperature=0.5)
    want = jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32) / 0.5, -1), targets[..., None], -1)[..., 0]
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)


def test_chunked_logprobs_and_gradient_equal_the_full_ones():
    state = tiny_state()
    b = sft_batch(t=13)
    graphdef = state.graphdef

    def total(params, chunk):
        model = nnx.merge(graphdef, params)
        return jnp.sum(
            summed_logprobs(model, b.input_ids, b.attention_mask, b.loss_mask, temperature=0.9, chunk_size=chunk)
        )

    full = sequence_logprobs(state.model(), b.input_ids, b.attention_mask, temperature=0.9)
    chunked = sequence_logprobs(state.model(), b.input_ids, b.attention_mask, temperature=0.9, chunk_size=5)
    assert full.shape == (8, 13) and float(jnp.max(jnp.abs(full[:, 0]))) == 0.0
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(full), atol=1e-6, rtol=0)
    grad = jax.jit(jax.grad(total), static_argnums=1)
    g_full, g_chunk = grad(state.params, None), grad(state.params, 5)
    scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(g_full))
    # measured: max |grad| 4.8, max difference 1.4e-6 (fp32 summation order of the chunked backward)
    for a, c in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_chunk)):
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), atol=1e-6 * scale, rtol=0)


def test_entropy_bonus_reaches_the_grpo_loss():
    """sequence_logprobs_and_entropy equals the direct formulas, and entropy_coef changes the GRPO step's loss."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from rewardsql_jax.models import ModelConfig, build_model
    from rewardsql_jax.training.batch import RLBatch
    from rewardsql_jax.training.logprobs import sequence_logprobs, sequence_logprobs_and_entropy
    from rewardsql_jax.training.step import loss_and_grads

    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=32,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        attention_bias=True,
    )
    model = build_model(cfg, seed=0)
    ids = np.random.RandomState(1).randint(0, 32, (2, 9))
    lp, ent = sequence_logprobs_and_entropy(model, ids, temperature=0.7)
    np.testing.assert_allclose(lp, sequence_logprobs(model, ids, temperature=0.7), atol=1e-6)
    p = jax.nn.softmax(model(ids)[:, :-1] / 0.7, axis=-1)
    np.testing.assert_allclose(ent[:, 1:], -jnp.sum(p * jnp.log(p), -1), atol=1e-5)
    graphdef, params = nnx.split(model, nnx.Param)
    mask = np.zeros((2, 9), np.float32)
    mask[:, 5:] = 1
    batch = RLBatch(
        input_ids=ids,
        attention_mask=np.ones_like(ids),
        completion_mask=mask,
        old_logprobs=np.asarray(lp),
        advantages=np.zeros(2, np.float32),
    )
    base, _, _ = loss_and_grads(params, None, graphdef, batch, loss_name="grpo", loss_options={"temperature": 0.7})
    bonus, _, metrics = loss_and_grads(
        params, None, graphdef, batch, loss_name="grpo", loss_options={"temperature": 0.7, "entropy_coef": 0.1}
    )
    mean_entropy = float(np.mean(np.sum(np.asarray(ent) * mask, -1) / mask.sum(-1)))
    np.testing.assert_allclose(float(bonus) - float(base), -0.1 * mean_entropy, rtol=1e-5)
