"""The fused vocabulary head (``training.vocab_head``) equals projection + log-softmax + pick under autodiff: the
same log-probs, the same gradients w.r.t. the hidden states and every parameter, the same token accuracy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rewardsql_jax import losses
from rewardsql_jax.ops import first_argmax
from rewardsql_jax.training.logprobs import target_logprobs
from rewardsql_jax.training.vocab_head import _first_argmax_is, head_logprobs

from _train_tiny import V, tiny_state


def _plain(model, hidden, targets, temperature):
    return target_logprobs(model.logits_from_hidden(hidden), targets, temperature=temperature)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_equal_autodiff_of_the_plain_head(tied, temperature):
    state = tiny_state(seed=1, tie_word_embeddings=tied)
    graphdef = state.graphdef
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(k1, (3, 7, 32))
    targets = jax.random.randint(k2, (3, 7), 0, V)
    weights = jax.random.normal(k3, (3, 7))  # a non-uniform cotangent per position

    def objective(head):
        def f(params, h):
            return jnp.sum(weights * head(nnx.merge(graphdef, params), h, targets, temperature))

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    def fused(model, h, y, t):
        return head_logprobs(model, h, y, temperature=t)

    v_plain, (gp_plain, gh_plain) = objective(_plain)(state.params, hidden)
    v_fused, (gp_fused, gh_fused) = objective(fused)(state.params, hidden)
    np.testing.assert_allclose(float(v_fused), float(v_plain), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gh_fused), np.asarray(gh_plain), atol=1e-6, rtol=1e-5)
    plain_leaves, fused_leaves = jax.tree.leaves(gp_plain), jax.tree.leaves(gp_fused)
    assert len(plain_leaves) == len(fused_leaves)
    nonzero = 0
    for a, b in zip(plain_leaves, fused_leaves):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6, rtol=1e-5)
        nonzero += bool(np.any(np.asarray(a) != 0))
    assert nonzero >= 1  # the output weights get a gradient (embedding when tied, lm_head otherwise)
    lp = head_logprobs(state.model(), hidden, targets, temperature=temperature)
    assert lp.shape == (3, 7) and lp.dtype == jnp.float32


def test_hit_is_first_argmax_with_ties_and_nan_rows():
    logits = jnp.array(
        [
            [0.0, 3.0, 3.0, 1.0],  # tie at the maximum: the first index (1) is the argmax
            [0.0, 3.0, 3.0, 1.0],
            [2.0, 0.0, 1.0, 2.0],
            [1.0, jnp.nan, 0.0, 0.0],  # NaN row: first_argmax gives V - 1
            [1.0, jnp.nan, 0.0, 0.0],
            [-jnp.inf, -jnp.inf, -jnp.inf, -jnp.inf],
        ]
    )
    for y in range(4):
        targets = jnp.full((logits.shape[0],), y, jnp.int32)
        m = jnp.max(logits, axis=-1)
        picked = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
        got = _first_argmax_is(logits, m, picked, targets)
        want = (first_argmax(logits) == targets).astype(jnp.float32)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_sft_from_logprobs_equals_sft_on_logits():
    k1, k2, k3, k4 = jax.random.split(jax.random.key(3), 4)
    logits = 3 * jax.random.normal(k1, (4, 6, 19))
    targets = jax.random.randint(k2, (4, 6), 0, 19)
    targets = targets.at[0, :].set(first_argmax(logits)[0])  # some hits
    mask = (jax.random.uniform(k3, (4, 6)) > 0.3).astype(jnp.float32).at[2].set(0.0)
    weights = jax.random.uniform(k4, (4,))
    lp = target_logprobs(logits, targets)
    hit = (first_argmax(logits) == targets).astype(jnp.float32)
    sft = losses.get("sft")
    for reduction in ("token_mean", "sequence_mean"):
        for w in (None, weights):
            want_loss, want_m = sft(logits, targets, mask, reduction=reduction, weights=w)
            got_loss, got_m = sft.from_logprobs(lp, hit, mask, reduction=reduction, weights=w)
            np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-6)
            assert set(got_m) == set(want_m)
            for name in want_m:
                np.testing.assert_allclose(float(got_m[name]), float(want_m[name]), rtol=1e-6)
