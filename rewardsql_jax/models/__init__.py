"""Flax NNX decoder models (Qwen2, Llama), HF checkpoint I/O, sharding rules, PRM head."""
from .config import ModelConfig
from .registry import MODEL_CLASSES, build_model
from .transformer import CausalLM, KVCache, init_cache
