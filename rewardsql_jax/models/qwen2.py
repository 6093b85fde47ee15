"""Qwen2 family (Qwen2.5, Qwen2.5-Coder): GQA with q/k/v bias, RoPE theta from config, tied or untied embeddings."""

from __future__ import annotations

from flax import nnx

from .config import ModelConfig
from .transformer import CausalLM


class Qwen2ForCausalLM(CausalLM):
    """Flax NNX port of ``transformers.Qwen2ForCausalLM`` (q/k/v projections carry a bias, o_proj none)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.model_type != "qwen2" or not cfg.attention_bias:
            raise ValueError("Qwen2ForCausalLM needs model_type='qwen2' with attention_bias=True")
        super().__init__(cfg, rngs=rngs)
