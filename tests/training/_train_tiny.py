"""Tiny Qwen2-shaped model and random batches shared by the training tests."""

from __future__ import annotations

import numpy as np

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.training.batch import PRMBatch, PreferenceBatch, RLBatch, RSBatch, SFTBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state

V = 128


def tiny_config(**overrides) -> ModelConfig:
    """2 layers, hidden 32, 4 heads / 2 KV heads, vocab 128, untied head."""
    kw = dict(
        model_type="qwen2",
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
    )
    kw.update(overrides)
    return ModelConfig(**kw)


def tiny_state(seed=0, *, with_reference=False, lr=1e-3, eps=1e-6, **model_overrides):
    """TrainState of a fresh tiny model with AdamW(lr, wd 0.01, clip 1.0)."""
    tx = make_optimizer(OptimizerConfig(learning_rate=lr, weight_decay=0.01, eps=eps))
    return create_train_state(
        build_model(tiny_config(**model_overrides), seed=seed), tx, seed=seed, with_reference=with_reference
    )


def _ids_mask(rng, b, t, prompt=4):
    ids = rng.integers(0, V, (b, t)).astype(np.int32)
    attn = np.ones((b, t), np.int32)
    attn[0, -3:] = 0
    attn[b // 2, -1:] = 0
    comp = np.zeros((b, t), np.float32)
    comp[:, prompt:] = 1.0
    comp[1, prompt:] = 0.0  # a row with no completion tokens (exercises the max(count, 1) floors)
    return ids, attn, comp * attn


def sft_batch(seed=0, b=8, t=12) -> SFTBatch:
    """Random SFT batch with padding and one row without targets."""
    ids, attn, comp = _ids_mask(np.random.default_rng(seed), b, t)
    return SFTBatch(ids, attn, comp)


def rs_batch(seed=0, b=8, t=12) -> RSBatch:
    """The SFT batch's rows as candidates with rewards in [-1, 2): about half are kept at threshold 0.5."""
    ids, attn, comp = _ids_mask(np.random.default_rng(seed), b, t)
    rewards = np.array([1.5, -1.0, 0.7, 0.2, 1.9, 0.6, -0.5, 1.0][:b], np.float32)
    return RSBatch(ids, attn, comp, rewards)


def rl_batch(seed=0, b=8, t=12, *, per_token=True, with_ref=True) -> RLBatch:
    """Random policy-gradient batch: old/ref log-probs, advantages, token rewards."""
    rng = np.random.default_rng(seed)
    ids, attn, comp = _ids_mask(rng, b, t)

    def lp():  # near uniform: log 1/128 ~ -4.85
        return (-4.9 + 0.3 * rng.normal(size=(b, t))).astype(np.float32)

    adv = rng.normal(size=(b, t) if per_token else (b,)).astype(np.float32)
    return RLBatch(
        ids,
        attn,
        comp,
        old_logprobs=lp(),
        advantages=adv,
        ref_logprobs=lp() if with_ref else None,
        token_rewards=rng.normal(size=(b, t)).astype(np.float32) * comp,
    )


def preference_batch(seed=0, b=8, t=12) -> PreferenceBatch:
    """Random chosen/rejected pairs sharing a 4-token prompt."""
    rng = np.random.default_rng(seed)
    c_ids, c_attn, c_mask = _ids_mask(rng, b, t)
    r_ids, r_attn, r_mask = _ids_mask(rng, b, t)
    r_ids[:, :4] = c_ids[:, :4]
    c_mask[1, 4:] = c_attn[1, 4:]
    r_mask[1, 4:] = r_attn[1, 4:]
    return PreferenceBatch(c_ids, c_attn, c_mask, r_ids, r_attn, r_mask)


def prm_batch(seed=0, b=8, t=12, s=3) -> PRMBatch:
    """Random PRM batch: s step tags per row, the last step of row 0 is padding."""
    rng = np.random.default_rng(seed)
    ids, attn, _ = _ids_mask(rng, b, t)
    pos = np.sort(rng.choice(np.arange(4, t - 3), size=(b, s)), axis=1).astype(np.int32)
    labels = rng.integers(0, 2, (b, s)).astype(np.float32)
    mask = np.ones((b, s), np.float32)
    mask[0, -1] = 0.0
    return PRMBatch(ids, attn, pos, labels, mask)
