"""The one fresh (randomly initialised) Qwen2 of a configured shape, for every pipeline that trains from scratch.

Reward-SQL's RL stage and planner (``stages.policy``, ``planning.from_run``) and SQLConductor's policy and action
model (SQLConductor Sec. 4.4, both small models trained from scratch on CPU) all build it here, so a shape in a
config means one architecture everywhere: tied embeddings, q/k/v biases (Qwen2), RoPE theta 10000,
``head_dim = hidden_size // num_heads``.
"""

from __future__ import annotations

from .config import ModelConfig
from .registry import build_model

ROPE_THETA = 10000.0


def fresh_config(shape, vocab_size: int, eos_token_id: int | None = None) -> ModelConfig:
    """The ``ModelConfig`` of a fresh Qwen2 of ``shape`` (``hidden_size``, ``intermediate_size``, ``num_layers``,
    ``num_heads``, ``num_kv_heads``, ``max_len``, ``dtype``: e.g. a ``stages.run_config.ModelConfigSection``)
    with ``vocab_size`` tokens (the tokenizer's length when it is known)."""
    return ModelConfig(
        model_type="qwen2",
        vocab_size=int(vocab_size),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.hidden_size // shape.num_heads,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=True,
        attention_bias=True,
        max_position_embeddings=shape.max_len,
        eos_token_id=eos_token_id,
        dtype=shape.dtype,
    )


def fresh_model(shape, vocab_size: int, eos_token_id: int | None, seed: int):
    """A randomly initialised model of ``fresh_config(shape, vocab_size, eos_token_id)`` (``build_model``)."""
    return build_model(fresh_config(shape, vocab_size, eos_token_id), seed=seed)
