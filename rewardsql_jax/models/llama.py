"""Llama family: GQA without q/k/v bias (unless ``attention_bias``), RoPE, RMSNorm, SwiGLU."""

from __future__ import annotations

from flax import nnx

from .config import ModelConfig
from .transformer import CausalLM


class LlamaForCausalLM(CausalLM):
    """Flax NNX port of ``transformers.LlamaForCausalLM`` (default RoPE only)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.model_type != "llama":
            raise ValueError("LlamaForCausalLM needs model_type='llama'")
        super().__init__(cfg, rngs=rngs)
