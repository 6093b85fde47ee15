"""What a model architecture declares: its HF config parse/emit, checkpoint tensor names (HF and GGUF), block options.

One ``Architecture`` per file (``llama.py``, ``qwen2.py``); ``registry.py`` maps a ``model_type`` / HF architecture /
GGUF architecture to it. The shared decoder (``transformer.py``) reads only ``BlockOptions``; the loaders
(``hf.py``, ``gguf.py``) read only the architecture's tables, so no module outside a architecture file branches on its name.

Adding a architecture (e.g. Gemma3) is one file: its ``CausalLM`` subclass, its ``BlockOptions`` (plus any option the
shared block does not have yet: Gemma3's q/k norms, sandwich norms, scaled embeddings, sliding-window layers), its
HF and GGUF names, its config parse/emit, and one line in ``registry.ARCHITECTURES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .config import ModelConfig


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """One checkpoint tensor: its key, the NNX state path, and whether the stored tensor is the transpose."""

    key: str
    path: tuple
    transpose: bool


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """Per-architecture choices of the shared decoder block.

    ``o_proj_bias``: the attention output projection carries a bias when ``attention_bias`` (HF Llama) or never
    (Qwen2, whose q/k/v carry one). RoPE is HF's rotate-half layout in every architecture; a GGUF file that stores Q/K
    rows in llama.cpp's interleaved order is undone on load (``Architecture.gguf_qk_permuted``).
    """

    o_proj_bias: bool

    def has_o_proj_bias(self, cfg: ModelConfig) -> bool:
        """Whether ``cfg``'s attention output projection carries a bias (the model and its key tables agree)."""
        return cfg.attention_bias and self.o_proj_bias


@dataclasses.dataclass(frozen=True)
class CheckpointNames:
    """Tensor names of a llama-style decoder in one checkpoint format.

    ``layer`` is the per-layer prefix with ``{i}`` for the layer index; ``modules`` maps an NNX module path inside a
    layer (``"self_attn.q_proj"``) to its name under that prefix. A Linear's tensors are ``<name>.weight`` (and
    ``<name>.bias``); a norm's is ``<name>.weight``.
    """

    embed: str
    final_norm: str
    lm_head: str
    layer: str
    modules: Mapping[str, str]


LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP_LINEARS = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")


def key_table(cfg: ModelConfig, names: CheckpointNames, block: BlockOptions) -> tuple[KeyMap, ...]:
    """Every parameter of ``cfg``'s model, in checkpoint order. HF ``nn.Linear`` and GGUF both store a projection
    ``[out, in]`` and our ``Linear.kernel`` is ``[in, out]``, so every projection kernel is transposed; embeddings,
    norms and biases are copied as they are. With tied embeddings there is no ``lm_head``."""

    def tensor(name: str, suffix: str) -> str:
        return f"{name}.{suffix}"

    rows = [KeyMap(tensor(names.embed, "weight"), ("embed_tokens",), False)]
    biases = {
        "self_attn.q_proj": cfg.attention_bias,
        "self_attn.k_proj": cfg.attention_bias,
        "self_attn.v_proj": cfg.attention_bias,
        "self_attn.o_proj": block.has_o_proj_bias(cfg),
        **dict.fromkeys(MLP_LINEARS, cfg.mlp_bias),
    }
    for i in range(cfg.num_hidden_layers):
        prefix, p = names.layer.format(i=i), ("layers", i)
        for module in (NORMS[0], *LINEARS, NORMS[1], *MLP_LINEARS):
            name = f"{prefix}.{names.modules[module]}"
            path = p + tuple(module.split("."))
            if module in NORMS:
                rows.append(KeyMap(tensor(name, "weight"), path + ("weight",), False))
                continue
            rows.append(KeyMap(tensor(name, "weight"), path + ("kernel",), True))
            if biases[module]:
                rows.append(KeyMap(tensor(name, "bias"), path + ("bias",), False))
    rows.append(KeyMap(tensor(names.final_norm, "weight"), ("norm", "weight"), False))
    if not cfg.tie_word_embeddings:
        rows.append(KeyMap(tensor(names.lm_head, "weight"), ("lm_head", "kernel"), True))
    return tuple(rows)


def hf_decoder_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ModelConfig`` fields every llama-style HF ``config.json`` spells the same way (the architecture adds its own).
    Unsupported RoPE scaling and sliding windows are refused: the shared block implements neither."""
    rope_scaling = d.get("rope_scaling")
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) not in (None, "default"):
        raise ValueError(f"rope_scaling {rope_scaling} is not supported yet; only default RoPE is implemented")
    if d.get("use_sliding_window"):
        raise ValueError("use_sliding_window=true is not supported; set it to false in config.json")
    rope_theta = d.get("rope_theta")
    if rope_theta is None:  # transformers >= 5 nests it under rope_parameters
        rope_theta = (d.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    heads = d["num_attention_heads"]
    eos = d.get("eos_token_id")
    return dict(
        model_type=d["model_type"],
        vocab_size=d["vocab_size"],
        hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"],
        num_hidden_layers=d["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=d.get("num_key_value_heads") or heads,
        head_dim=d.get("head_dim") or d["hidden_size"] // heads,
        rope_theta=float(rope_theta),
        rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
        mlp_bias=bool(d.get("mlp_bias", False)),
        max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
        bos_token_id=d.get("bos_token_id"),
        eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
    )


def hf_decoder_dict(cfg: ModelConfig, architecture: str) -> dict[str, Any]:
    """The ``config.json`` fields every llama-style architecture writes (the architecture adds its own)."""
    d: dict[str, Any] = dict(
        architectures=[architecture],
        model_type=cfg.model_type,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        rope_theta=cfg.rope_theta,
        rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_word_embeddings,
        max_position_embeddings=cfg.max_position_embeddings,
        hidden_act="silu",
        torch_dtype=cfg.param_dtype,
    )
    if cfg.bos_token_id is not None:
        d["bos_token_id"] = cfg.bos_token_id
    if cfg.eos_token_id is not None:
        d["eos_token_id"] = list(cfg.eos_token_id) if isinstance(cfg.eos_token_id, tuple) else cfg.eos_token_id
    return d


def gguf_decoder_fields(meta: Mapping[str, Any], tensor_names: frozenset[str], names: CheckpointNames) -> dict:
    """The ``ModelConfig`` fields of a llama-style GGUF file, from its ``<arch>.*`` and ``tokenizer.ggml.*``
    metadata (llama.cpp's key names) and which tensors it holds (no ``output.weight``: tied embeddings)."""
    arch = meta["general.architecture"]

    def key(name, default=None):
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF metadata has no {arch}.{name}; the file is incomplete (re-export it)")
        return value

    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"GGUF {arch}.rope.scaling.type={scaling!r} is not supported; only default RoPE is")
    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    vocab = meta.get(f"{arch}.vocab_size")
    if vocab is None:
        vocab = len(meta.get("tokenizer.ggml.tokens") or ()) or None
    if vocab is None:
        raise ValueError(f"GGUF metadata has neither {arch}.vocab_size nor tokenizer.ggml.tokens")
    return dict(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_hidden_layers=int(key("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("attention.key_length", hidden // heads)),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        tie_word_embeddings=f"{names.lm_head}.weight" not in tensor_names,
        max_position_embeddings=int(key("context_length")),
        bos_token_id=_optional_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos_token_id=_optional_int(meta.get("tokenizer.ggml.eos_token_id")),
    )


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """Everything that differs between decoder architectures, declared in the architecture's file.

    ``parse_hf(d)``: ``ModelConfig`` fields of a HF ``config.json``; ``emit_hf(cfg)``: the ``config.json`` that
    transformers rebuilds the model from; ``parse_gguf(meta, tensor_names)``: fields of a GGUF file;
    ``gguf_qk_permuted``: llama.cpp's converter reorders this architecture's Q/K rows for its interleaved RoPE (Llama
    yes, Qwen2 no), so the GGUF loader undoes it.
    """

    model_type: str
    hf_architecture: str
    gguf_architecture: str
    model_class: type
    block: BlockOptions
    hf_names: CheckpointNames
    gguf_names: CheckpointNames
    gguf_qk_permuted: bool
    parse_hf: Callable[[Mapping[str, Any]], dict]
    emit_hf: Callable[[ModelConfig], dict]
    parse_gguf: Callable[[Mapping[str, Any], frozenset[str]], dict]

    def hf_keys(self, cfg: ModelConfig) -> tuple[KeyMap, ...]:
        return key_table(cfg, self.hf_names, self.block)

    def gguf_keys(self, cfg: ModelConfig) -> tuple[KeyMap, ...]:
        return key_table(cfg, self.gguf_names, self.block)
