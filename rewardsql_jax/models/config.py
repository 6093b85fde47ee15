"""Model configuration: one frozen dataclass for every decoder architecture (each architecture parses its checkpoints' configs
into it: ``registry.config_from_hf``, ``gguf.gguf_config``)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .lora import LoRAConfig

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

    model_type: str  # the architecture (registry.ARCHITECTURES)
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
    # run the layers of a full-sequence pass (train steps, prefill) as one ``lax.scan`` over their stacked weights:
    # XLA compiles one layer instead of every one (the decode step keeps its unrolled layers)
    scan_layers: bool = False
    lora: LoRAConfig = LoRAConfig()

    def __post_init__(self):
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl={self.attention_impl!r}; choose one of {ATTENTION_IMPLS}")
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
