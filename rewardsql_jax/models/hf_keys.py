"""The one table between HF checkpoint keys and NNX parameter paths (Qwen2 and Llama).

HF ``nn.Linear`` stores ``weight [out, in]``; our ``Linear.kernel`` is ``[in, out]``, so every
projection kernel is transposed on the way in and out. Embeddings, norms and biases are copied as is.
With tied embeddings the checkpoint has no ``lm_head.weight`` and the model no ``lm_head``.
"""

from __future__ import annotations

import dataclasses

from .config import ModelConfig


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """One checkpoint tensor: HF key, NNX state path, and whether the HF tensor is the transpose."""

    hf_key: str
    path: tuple
    transpose: bool


def _linear(hf_prefix: str, path: tuple, bias: bool) -> list[KeyMap]:
    rows = [KeyMap(f"{hf_prefix}.weight", path + ("kernel",), True)]
    if bias:
        rows.append(KeyMap(f"{hf_prefix}.bias", path + ("bias",), False))
    return rows


def o_proj_has_bias(cfg: ModelConfig) -> bool:
    """HF Llama gives o_proj a bias when ``attention_bias``; Qwen2's o_proj never has one."""
    return cfg.attention_bias and cfg.model_type == "llama"


def hf_key_table(cfg: ModelConfig) -> tuple[KeyMap, ...]:
    """Every parameter of ``cfg``'s model, in checkpoint order, as :class:`KeyMap` rows."""
    rows = [KeyMap("model.embed_tokens.weight", ("embed_tokens",), False)]
    for i in range(cfg.num_hidden_layers):
        hf, p = f"model.layers.{i}", ("layers", i)
        rows.append(KeyMap(f"{hf}.input_layernorm.weight", p + ("input_layernorm", "weight"), False))
        for name in ("q_proj", "k_proj", "v_proj"):
            rows += _linear(f"{hf}.self_attn.{name}", p + ("self_attn", name), cfg.attention_bias)
        rows += _linear(f"{hf}.self_attn.o_proj", p + ("self_attn", "o_proj"), o_proj_has_bias(cfg))
        rows.append(KeyMap(f"{hf}.post_attention_layernorm.weight", p + ("post_attention_layernorm", "weight"), False))
        for name in ("gate_proj", "up_proj", "down_proj"):
            rows += _linear(f"{hf}.mlp.{name}", p + ("mlp", name), cfg.mlp_bias)
    rows.append(KeyMap("model.norm.weight", ("norm", "weight"), False))
    if not cfg.tie_word_embeddings:
        rows.append(KeyMap("lm_head.weight", ("lm_head", "kernel"), True))
    return tuple(rows)


# Checkpoint entries that carry no learned weight (buffers some older exports include); skipped silently.
IGNORED_HF_SUFFIXES = ("rotary_emb.inv_freq",)
