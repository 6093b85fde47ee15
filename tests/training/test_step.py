"""Train step: exact micro-batch accumulation, adapters feed the registered losses, NaN guard, bf16, reference."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rewardsql_jax import losses
from rewardsql_jax.models import LoRAConfig, LoRAParam, build_model
from rewardsql_jax.models.lora import TARGETS
from rewardsql_jax.training.batch import SFTBatch
from rewardsql_jax.training.logprobs import sequence_logprobs
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import loss_and_grads, make_train_step, with_compute_dtype

from _train_tiny import preference_batch, prm_batch, rl_batch, rs_batch, sft_batch, tiny_config, tiny_state

TAGS = {"tag_token_ids": (3, 7)}
CASES = {
    "sft": ("sft", sft_batch, {}),
    "rs": ("rs", rs_batch, {"threshold": 0.5}),
    "grpo-grpo-kl": ("grpo", rl_batch, {"beta": 0.04, "temperature": 0.8}),
    "grpo-dapo": ("grpo", rl_batch, {"agg": "dapo", "clip_eps_high": 0.28}),
    "grpo-dr_grpo": ("grpo", functools.partial(rl_batch, per_token=False), {"agg": "dr_grpo", "max_len": 16}),
    "reinforce_pp": ("reinforce_pp", rl_batch, {"kl_coef": 0.01}),
    "dpo-ref-model": ("dpo", preference_batch, {"beta": 0.1}),
    "prm": ("prm", prm_batch, TAGS),
}


def _grads(state, batch, name, opts, m):
    fn = jax.jit(
        lambda p, r, b: loss_and_grads(p, r, state.graphdef, b, loss_name=name, loss_options=opts, micro_batches=m)
    )
    return fn(state.params, state.ref_params, batch)


def _loss(state, batch, name, opts, compute_dtype=None):
    """Loss only (jitted; no gradient) as the step computes it."""
    graphdef = with_compute_dtype(state.graphdef, state.params, compute_dtype)
    fn = functools.partial(loss_and_grads, graphdef=graphdef, loss_name=name, loss_options=opts)
    return jax.jit(lambda p, b: fn(p, None, batch=b)[0])(state.params, batch)


@pytest.mark.parametrize("case", list(CASES))
def test_micro_batches_give_the_full_batch_gradient(case):
    name, make_batch, opts = CASES[case]
    state = tiny_state(with_reference=True, num_hidden_layers=1)  # depth is irrelevant here; halves compile time
    if name == "dpo":  # a reference different from the policy, so the DPO logits are not all zero
        state = state.replace(ref_params=tiny_state(seed=1, num_hidden_layers=1).params)
    batch = make_batch()
    loss1, g1, _ = _grads(state, batch, name, opts, 1)
    loss4, g4, _ = _grads(state, batch, name, opts, 4)
    assert np.isfinite(float(loss1)) and float(jnp.abs(loss1)) > 1e-3
    np.testing.assert_allclose(float(loss4), float(loss1), atol=1e-6, rtol=0)
    norm = float(jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(g1))))
    assert norm > 1e-3  # the gradient is not trivially zero
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g4)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6, rtol=0)


def test_train_step_update_is_the_same_with_four_micro_batches():
    batch = sft_batch()
    out = []
    for m in (1, 4):
        state = tiny_state()
        state, metrics = make_train_step(state.graphdef, "sft", micro_batches=m)(state, batch)
        out.append((state, metrics))
    (s1, m1), (s4, m4) = out
    assert int(s1.step) == int(s4.step) == 1
    np.testing.assert_allclose(float(m4["loss"]), float(m1["loss"]), atol=1e-6, rtol=0)
    for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s4.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6, rtol=0)
    before = tiny_state().params
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(before)))
    assert moved > 1e-4  # the step did update the weights


def test_grpo_and_prm_adapters_call_the_registered_losses_on_model_outputs():
    state = tiny_state()
    model = state.model()
    rl = rl_batch()
    opts = {"beta": 0.04, "clip_eps": 0.2}
    lp = sequence_logprobs(model, rl.input_ids, rl.attention_mask, temperature=0.8)
    want, _ = losses.grpo(lp, rl.old_logprobs, rl.advantages, rl.completion_mask, ref_logprobs=rl.ref_logprobs, **opts)
    got = _loss(state, rl, "grpo", {**opts, "temperature": 0.8})
    np.testing.assert_allclose(float(got), float(want), atol=1e-6, rtol=0)
    # token-aligned log-probs: entry t scores token t given the tokens before it
    full = jax.nn.log_softmax(model(rl.input_ids, rl.attention_mask) / 0.8, axis=-1)
    np.testing.assert_allclose(float(lp[2, 5]), float(full[2, 4, rl.input_ids[2, 5]]), atol=1e-5, rtol=0)

    pb = prm_batch()
    logits = model(pb.input_ids, pb.attention_mask)
    tag_logits = jnp.take_along_axis(logits, jnp.asarray(pb.tag_positions)[..., None], axis=1)[..., [3, 7]]
    want, _ = losses.prm(tag_logits, pb.labels, pb.step_mask)
    got = _loss(state, pb, "prm", TAGS)
    np.testing.assert_allclose(float(got), float(want), atol=1e-6, rtol=0)


def test_reinforce_pp_whitens_over_the_whole_batch_like_the_loss():
    state = tiny_state()
    rl = rl_batch()

    @jax.jit
    def both(params):
        model = nnx.merge(state.graphdef, params)
        lp = sequence_logprobs(model, rl.input_ids, rl.attention_mask)
        want, _ = losses.reinforce_pp(
            lp, rl.old_logprobs, rl.token_rewards, rl.completion_mask, ref_logprobs=rl.ref_logprobs, kl_coef=0.01
        )
        got, _, metrics = loss_and_grads(
            params, None, state.graphdef, rl, loss_name="reinforce_pp", loss_options={"kl_coef": 0.01}
        )
        return want, got, metrics

    want, got, metrics = both(state.params)
    np.testing.assert_allclose(float(got), float(want), atol=1e-6, rtol=0)
    assert "returns/mean" in metrics and "kl" in metrics


def test_non_finite_loss_leaves_the_state_unchanged():
    state = tiny_state()
    before = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    rl = rl_batch()
    bad = rl.replace(advantages=np.where(np.arange(12) == 6, np.nan, rl.advantages).astype(np.float32))
    state, metrics = make_train_step(state.graphdef, "grpo", {})(state, bad)
    assert not bool(metrics["loss_is_finite"])
    assert int(state.step) == 0
    for a, b in zip(before, jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(b), a)
    assert np.all(np.isfinite(np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.opt_state)])))


def test_bf16_compute_keeps_fp32_master_weights():
    batch = sft_batch()
    state = tiny_state()
    loss32, loss16 = _loss(state, batch, "sft", {}), _loss(state, batch, "sft", {}, "bfloat16")
    assert 0.0 < abs(float(loss16) - float(loss32)) < 2e-2  # bf16 really ran (not bit-identical) and stays close
    state, metrics = make_train_step(state.graphdef, "sft", compute_dtype="bfloat16")(state, batch)
    np.testing.assert_allclose(float(metrics["loss"]), float(loss16), atol=1e-6, rtol=0)
    assert int(state.step) == 1
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))


def test_reference_params_are_frozen_and_used_for_kl():
    state = tiny_state(with_reference=True)
    ref_before = [np.asarray(x) for x in jax.tree.leaves(state.ref_params)]
    rl = rl_batch(with_ref=False)
    step = make_train_step(state.graphdef, "grpo", {"beta": 0.1})
    state, m0 = step(state, rl)
    assert float(m0["kl"]) == pytest.approx(0.0, abs=1e-7)  # reference == initial policy
    state, m1 = step(state, rl)
    assert float(m1["kl"]) > 1e-7  # the policy moved away from the frozen reference
    for a, b in zip(ref_before, jax.tree.leaves(state.ref_params)):
        np.testing.assert_array_equal(np.asarray(b), a)


def test_rs_step_is_sft_on_the_kept_candidates():
    state = tiny_state(num_hidden_layers=1)
    batch = rs_batch()
    keep = np.asarray(batch.rewards) > 0.5
    kept_rows = SFTBatch(*(np.asarray(x)[keep] for x in (batch.input_ids, batch.attention_mask, batch.loss_mask)))
    loss_rs, g_rs, m = _grads(state, batch, "rs", {"threshold": 0.5}, 1)
    loss_sft, g_sft, _ = _grads(state, kept_rows, "sft", {}, 1)
    np.testing.assert_allclose(float(loss_rs), float(loss_sft), atol=1e-6, rtol=0)
    np.testing.assert_allclose(float(m["kept_fraction"]), keep.mean(), atol=0)
    for a, b in zip(jax.tree.leaves(g_sft), jax.tree.leaves(g_rs)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6, rtol=0)


def _host(tree):
    return [np.array(x) for x in jax.tree.leaves(tree)]


def test_lora_step_trains_the_adapters_alone():
    """A model with LoRA adapters: the step's gradient and Adam moments are the adapters' only, the base weights
    come back bit-identical and the adapters move: B at once, A from the second step (its gradient is zero while
    B = 0). Layers recomputed (``remat``) and two micro-batches: the base enters every inner trace."""
    model = build_model(tiny_config(remat=True, lora=LoRAConfig(rank=4, targets=TARGETS)), seed=0)
    base, adapters = _host(nnx.state(model, nnx.Not(LoRAParam))), _host(nnx.state(model, LoRAParam))
    is_b = [path[-1] == "b" for path, _ in nnx.to_flat_state(nnx.state(model, LoRAParam))]
    state = create_train_state(model, make_optimizer(OptimizerConfig(learning_rate=1e-2)))
    moments = sorted(x.shape for x in jax.tree.leaves(state.opt_state) if x.ndim)
    assert moments == sorted([a.shape for a in adapters] * 2)  # mu and nu of every adapter, nothing else
    assert len(jax.tree.leaves(state.params)) == len(adapters) == 2 * 7 * 2 and sum(is_b) == 14
    step = make_train_step(state.graphdef, "sft", micro_batches=2)
    for i in (1, 2):
        state, metrics = step(state, sft_batch(seed=i))
        assert bool(metrics["loss_is_finite"]) and int(state.step) == i
        for before, after in zip(base, _host(state.frozen)):
            np.testing.assert_array_equal(after, before)
        moved = [float(np.abs(a - b).max()) > 1e-4 for a, b in zip(_host(state.params), adapters)]
        assert moved == (is_b if i == 1 else [True] * len(is_b))
    assert sorted(x.shape for x in jax.tree.leaves(state.opt_state) if x.ndim) == moments


def test_lora_dropout_acts_in_the_step_only():
    """``LoRAConfig.dropout`` changes the train step's gradient, not the model's forward outside it."""
    norms, logits = [], []
    ids = jnp.asarray(sft_batch().input_ids)
    for dropout in (0.0, 0.5):
        model = build_model(tiny_config(num_hidden_layers=1, lora=LoRAConfig(rank=4, dropout=dropout)), seed=0)
        for lora in (model.layers[0].self_attn.q_proj.lora, model.layers[0].self_attn.v_proj.lora):
            lora.b[...] = jnp.full(lora.b[...].shape, 0.1)
        logits.append(np.asarray(model(ids)))
        state = create_train_state(model, make_optimizer(OptimizerConfig()))
        norms.append(float(make_train_step(state.graphdef, "sft")(state, sft_batch())[1]["grad_norm"]))
    np.testing.assert_array_equal(logits[1], logits[0])
    assert abs(norms[1] - norms[0]) > 1e-3 * norms[0], norms
