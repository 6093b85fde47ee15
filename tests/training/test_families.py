"""A loss registered with only its family trains through its family (training/families.py), exactly like a built-in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses
from rewardsql_jax.losses import registry
from rewardsql_jax.training.step import make_train_step

from _train_tiny import preference_batch, rl_batch, sft_batch, tiny_state


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_LOSSES", dict(registry._LOSSES))


def _params_after(loss, options, batch, *, with_reference=False):
    state = tiny_state(with_reference=with_reference)
    state, metrics = make_train_step(state.graphdef, loss, options)(state, batch)
    return jax.tree.leaves(state.params), metrics


def _assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-7)


def test_policy_gradient_family_matches_grpo_token_mean(scratch_registry):
    """-A * ratio averaged over completion tokens is grpo with no clipping, no KL, agg=token_mean."""

    @losses.register("plain_ratio_pg", family="policy_gradient")
    def plain_ratio_pg(logprobs, old_logprobs, advantages, mask):
        per_token = -advantages * jnp.exp(logprobs - jax.lax.stop_gradient(old_logprobs))
        return jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), 1.0), {}

    for per_token in (True, False):  # [B, T] advantages, and [B] broadcast to tokens by the family
        batch = rl_batch(per_token=per_token)
        mine, _ = _params_after("plain_ratio_pg", {}, batch)
        ref, _ = _params_after("grpo", {"clip_eps": 1e6, "beta": 0.0, "agg": "token_mean"}, batch)
        _assert_same(mine, ref)


def test_policy_gradient_family_gets_reference_logprobs_when_it_asks(scratch_registry):
    seen = {}

    @losses.register("pg_with_kl", family="policy_gradient", reduction="sequence_mean")
    def pg_with_kl(logprobs, old_logprobs, advantages, mask, *, ref_logprobs, beta=0.5):
        seen["ref"] = ref_logprobs.shape
        per_seq = jnp.sum((-advantages * logprobs + beta * (logprobs - ref_logprobs)) * mask, -1)
        return jnp.mean(per_seq / jnp.maximum(jnp.sum(mask, -1), 1.0)), {"pg/beta": jnp.float32(beta)}

    batch = rl_batch(with_ref=False)
    _, metrics = _params_after("pg_with_kl", {"beta": 0.25}, batch, with_reference=True)
    assert seen["ref"] == batch.input_ids.shape
    assert float(metrics["pg/beta"]) == 0.25
    with pytest.raises(ValueError, match="reference"):
        _params_after("pg_with_kl", {}, batch, with_reference=False)


def test_preference_and_supervised_families(scratch_registry):
    @losses.register("my_dpo", family="preference", reduction="sequence_mean")
    def my_dpo(chosen, rejected, ref_chosen, ref_rejected, *, beta=0.1):
        return losses.dpo(chosen, rejected, ref_chosen, ref_rejected, beta=beta)

    @losses.register("my_sft", family="supervised")
    def my_sft(logits, targets, mask, *, weights=None):
        return losses.sft(logits, targets, mask)

    _assert_same(
        _params_after("my_dpo", {"beta": 0.2}, preference_batch(), with_reference=True)[0],
        _params_after("dpo", {"beta": 0.2}, preference_batch(), with_reference=True)[0],
    )
    _assert_same(_params_after("my_sft", {}, sft_batch())[0], _params_after("sft", {}, sft_batch())[0])


def test_a_family_loss_refuses_a_batch_of_another_family(scratch_registry):
    losses.register("pg_x", family="policy_gradient")(lambda lp, old, adv, mask: (jnp.sum(lp * mask), {}))
    with pytest.raises((TypeError, ValueError), match="RLBatch"):
        _params_after("pg_x", {}, sft_batch())


def test_sft_target_tokens_bound_gives_the_same_step():
    """``target_tokens=K`` projects only each row's first K loss positions onto the vocabulary: same update."""
    batch = sft_batch()  # 12 positions, loss on the last 8 of each row (one row has none)
    full, m_full = _params_after("sft", {}, batch)
    sparse, m_sparse = _params_after("sft", {"target_tokens": 8}, batch)
    _assert_same(sparse, full)
    assert float(m_sparse["loss"]) == pytest.approx(float(m_full["loss"]), rel=1e-6)
    weighted = {"reduction": "sequence_mean"}
    _assert_same(
        _params_after("sft", {**weighted, "target_tokens": 8}, batch)[0], _params_after("sft", weighted, batch)[0]
    )


def test_grpo_target_tokens_bound_gives_the_same_step():
    """``target_tokens=K`` on an RLBatch: log-probs (and the vocabulary projection) only at each row's first
    K completion positions; same update and metrics as the full [B, T, V] projection."""
    batch = rl_batch()  # 12 positions, completion on the last 8 of each row
    k = int(np.asarray(batch.completion_mask)[:, 1:].sum(axis=1).max())
    for opts in ({"clip_eps": 0.2, "beta": 0.04}, {"clip_eps": 0.2, "beta": 0.0, "agg": "dapo"}):
        full, m_full = _params_after("grpo", opts, batch)
        sparse, m_sparse = _params_after("grpo", {**opts, "target_tokens": k}, batch)
        _assert_same(sparse, full)
        for name in m_full:
            assert float(m_sparse[name]) == pytest.approx(float(m_full[name]), rel=1e-5, abs=1e-7), name
