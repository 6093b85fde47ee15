"""Model configuration: one frozen dataclass for every decoder family, read from a HF ``config.json``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
ATTENTION_IMPLS = ("xla", "auto", "pallas_interpret", "reference")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def resolve_dtype(name) -> jnp.dtype:
    """Map "float32" | "bfloat16" | "float16" (or a jnp dtype) to a jnp dtype, with a clear error otherwise."""
    if not isinstance(name, str):
        return jnp.dtype(name)
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; use one of {sorted(_DTYPES)}")
    return jnp.dtype(_DTYPES[name])


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Qwen2/Llama-style decoder (GQA, RoPE, RMSNorm, SwiGLU).

    ``dtype`` is the compute dtype, ``param_dtype`` the storage dtype of the weights
    (fp32 master weights with bf16 compute is ``param_dtype="float32", dtype="bfloat16"``).
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    dtype: str = "float32"
    param_dtype: str = "float32"
    attention_impl: str = "xla"  # xla | auto (Pallas on TPU/GPU, jnp reference on CPU) | pallas_interpret | reference
    remat: bool = False  # recompute each layer in the backward pass (activation memory ~ one layer)

    def __post_init__(self):
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl={self.attention_impl!r}; choose one of {ATTENTION_IMPLS}")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {self.model_type!r}; rewardsql_jax supports {SUPPORTED_MODEL_TYPES}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        resolve_dtype(self.dtype)
        resolve_dtype(self.param_dtype)

    @property
    def compute_dtype(self):
        return resolve_dtype(self.dtype)

    @property
    def weight_dtype(self):
        return resolve_dtype(self.param_dtype)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_dict(cls, d: dict, **overrides) -> ModelConfig:
        """Build from the fields of a HF ``config.json`` (Qwen2ForCausalLM / LlamaForCausalLM)."""
        model_type = d.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {model_type!r} in config.json; rewardsql_jax supports {SUPPORTED_MODEL_TYPES}"
            )
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
        fields = dict(
            model_type=model_type,
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
            attention_bias=True if model_type == "qwen2" else bool(d.get("attention_bias", False)),
            mlp_bias=bool(d.get("mlp_bias", False)),
            max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
            bos_token_id=d.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
        )
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_json(cls, path, **overrides) -> ModelConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"no config.json at {path}; pass a HF model directory that contains config.json")
        return cls.from_hf_dict(json.loads(path.read_text()), **overrides)

    def to_hf_dict(self) -> dict:
        """The ``config.json`` fields transformers needs to rebuild this architecture."""
        arch = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[self.model_type]
        d = dict(
            architectures=[arch],
            model_type=self.model_type,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tie_word_embeddings,
            max_position_embeddings=self.max_position_embeddings,
            hidden_act="silu",
            torch_dtype=self.param_dtype,
        )
        if self.model_type == "llama":
            d.update(attention_bias=self.attention_bias, mlp_bias=self.mlp_bias)
        else:
            d.update(use_sliding_window=False)
        if self.bos_token_id is not None:
            d["bos_token_id"] = self.bos_token_id
        if self.eos_token_id is not None:
            d["eos_token_id"] = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        return d
