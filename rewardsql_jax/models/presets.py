"""Architectures of the models the paper trains, from their HF ``config.json`` files: the model architecture's
presets, for building or planning a model without a checkpoint on disk
(``python -m rewardsql_jax.planning --model qwen2.5-coder-7b``)."""

from __future__ import annotations

from typing import Any

from .config import ModelConfig

# Qwen/Qwen2.5-Coder-{7B,32B}-Instruct config.json (untied embeddings, q/k/v bias, rope_theta 1e6).
_QWEN25_CODER = {
    "qwen2.5-coder-7b": dict(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4
    ),
    "qwen2.5-coder-32b": dict(
        hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40, num_key_value_heads=8
    ),
}

PRESETS = tuple(_QWEN25_CODER)


def preset_config(name: str, **overrides) -> ModelConfig:
    """ModelConfig of a named architecture (fp32 master weights unless overridden)."""
    key = name.lower()
    if key not in _QWEN25_CODER:
        raise ValueError(f"unknown model preset {name!r}; choose one of {list(PRESETS)} or pass a config.json")
    d = _QWEN25_CODER[key]
    fields: dict[str, Any] = dict(
        model_type="qwen2",
        vocab_size=152064,
        head_dim=d["hidden_size"] // d["num_attention_heads"],
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=True,
        max_position_embeddings=32768,
        eos_token_id=151645,
        **d,
    )
    fields.update(overrides)
    return ModelConfig(**fields)
