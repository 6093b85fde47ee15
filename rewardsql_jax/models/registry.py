"""Model family lookup: ``model_type`` -> NNX class."""

from __future__ import annotations

from flax import nnx

from .config import ModelConfig
from .llama import LlamaForCausalLM
from .qwen2 import Qwen2ForCausalLM

MODEL_CLASSES = {"qwen2": Qwen2ForCausalLM, "llama": LlamaForCausalLM}


def build_model(cfg: ModelConfig, *, seed: int = 0):
    """Randomly initialised model of ``cfg``'s family (weights ~ N(0, 0.02), norms 1, biases 0)."""
    if cfg.model_type not in MODEL_CLASSES:
        raise ValueError(f"unsupported model_type {cfg.model_type!r}; choose one of {sorted(MODEL_CLASSES)}")
    return MODEL_CLASSES[cfg.model_type](cfg, rngs=nnx.Rngs(params=seed))
