"""GroupedRLBatch (each prompt computed once for its G completions) gives the RLBatch loss and gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.training.collate import grouped_rl_batch, rl_batch
from rewardsql_jax.training.logprobs import sequence_logprobs, shared_prefix_logprobs
from rewardsql_jax.training.step import loss_and_grads, make_train_step

from _train_tiny import V, tiny_state

P, G = 4, 3


def _rollouts(seed=0, max_completion=7):
    """Prompts of different lengths, G completions each (different lengths, one of length 1), log-probs."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, V, n)) for n in (5, 9, 3, 8)]
    lengths = rng.integers(1, max_completion + 1, P * G)
    lengths[2] = 1
    lengths[4] = max_completion
    completions = [list(rng.integers(1, V, n)) for n in lengths]
    logprobs = [list(-4.9 + 0.3 * rng.normal(size=n)) for n in lengths]
    return rng, prompts, completions, logprobs


def _both(per_token: bool, field="advantages", seed=0):
    rng, prompts, completions, logprobs = _rollouts(seed)
    rows = [p for p in prompts for _ in range(G)]
    if per_token:
        values = dict(token_values=[rng.normal(size=len(c)).astype(np.float32) for c in completions])
    else:
        values = dict(advantages=rng.normal(size=P * G).astype(np.float32))
    flat = rl_batch(rows, completions, logprobs, length=20, pad_id=0, field=field, **values)
    grouped = grouped_rl_batch(
        prompts, completions, logprobs, group=G, prompt_length=12, completion_length=8, pad_id=0, field=field, **values
    )
    return flat, grouped


def test_shared_prefix_logprobs_equal_the_unshared_rows():
    state = tiny_state(num_hidden_layers=2)
    model = state.model()
    flat, grouped = _both(per_token=False)
    lp_rows = np.asarray(sequence_logprobs(model, flat.input_ids, flat.attention_mask, temperature=0.7))
    lp_grouped = np.asarray(
        shared_prefix_logprobs(model, grouped.prompt_ids, grouped.prompt_mask, grouped.completion_ids, temperature=0.7)
    )
    assert lp_grouped.shape == (P, G, 8)
    comp = np.asarray(grouped.completion_mask).astype(bool)
    for r in range(P * G):
        start = int(np.argmax(flat.completion_mask[r]))
        n = int(flat.completion_mask[r].sum())
        got = lp_grouped[r // G, r % G]
        np.testing.assert_allclose(got[:n], lp_rows[r, start : start + n], atol=2e-6, rtol=0)
        assert comp[r // G, r % G].sum() == n


CASES = {
    "grpo-seq-kl": ("grpo", False, "advantages", {"beta": 0.04, "kl": "k3", "temperature": 0.8}),
    "grpo-token-entropy": ("grpo", True, "advantages", {"entropy_coef": 0.01, "clip_eps": 0.2}),
    "grpo-dapo": ("grpo", True, "advantages", {"agg": "dapo", "beta": 0.01}),
    "grpo-dr_grpo": ("grpo", False, "advantages", {"agg": "dr_grpo", "max_len": 16}),
    "reinforce_pp": ("reinforce_pp", True, "token_rewards", {"kl_coef": 0.01, "gamma": 0.0}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_grouped_batch_gives_the_same_loss_and_gradients(case, micro_batches):
    name, per_token, field, opts = CASES[case]
    state = tiny_state(with_reference=True, num_hidden_layers=1)
    state = state.replace(ref_params=tiny_state(seed=1, num_hidden_layers=1).params)
    flat, grouped = _both(per_token, field)

    def run(batch, m):
        fn = jax.jit(
            lambda p, r, b: loss_and_grads(p, r, state.graphdef, b, loss_name=name, loss_options=opts, micro_batches=m)[
                :2
            ]
        )
        return fn(state.params, state.ref_params, batch)

    loss_f, g_f = run(flat, 1)
    loss_g, g_g = run(grouped, micro_batches)
    assert abs(float(loss_f)) > 1e-4
    np.testing.assert_allclose(float(loss_g), float(loss_f), atol=2e-6, rtol=1e-5)
    norm = float(jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(g_f))))
    assert norm > 1e-3
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g_g)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6, rtol=1e-4)


def test_train_step_accepts_grouped_batches_and_checks_them():
    state = tiny_state(with_reference=True, num_hidden_layers=1)
    _, grouped = _both(per_token=False)
    step = make_train_step(state.graphdef, "grpo", {"beta": 0.01}, micro_batches=2)
    new_state, metrics = step(state, grouped)
    assert bool(metrics["loss_is_finite"]) and int(new_state.step) == 1
    with pytest.raises(ValueError, match="not divisible by micro_batches=3"):
        make_train_step(state.graphdef, "grpo", micro_batches=3).validate(grouped)
    right_padded = grouped.replace(prompt_mask=np.asarray(grouped.prompt_mask)[:, ::-1].copy())
    with pytest.raises(ValueError, match="LEFT-padded"):
        right_padded.validate()
    with pytest.raises(ValueError, match="trains on SFTBatch"):
        make_train_step(state.graphdef, "sft").validate(grouped)


def test_grouped_builder_errors():
    _, prompts, completions, logprobs = _rollouts()
    kw = dict(group=G, prompt_length=12, completion_length=8, pad_id=0)
    with pytest.raises(ValueError, match="needs 12 completions"):
        grouped_rl_batch(prompts, completions[:-1], logprobs[:-1], advantages=np.zeros(11), **kw)
    with pytest.raises(ValueError, match="exceed prompt_length"):
        grouped_rl_batch(prompts, completions, logprobs, advantages=np.zeros(12), **{**kw, "prompt_length": 6})
    with pytest.raises(ValueError, match="exactly one of"):
        grouped_rl_batch(prompts, completions, logprobs, **kw)
