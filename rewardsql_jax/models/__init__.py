"""Flax NNX decoder models (Qwen2, Llama), HF checkpoint I/O, sharding rules, PRM head."""

from .config import ModelConfig
from .fresh import fresh_config, fresh_model
from .hf import from_pretrained, save_pretrained
from .prm_head import (
    StepTags,
    TagPositions,
    find_tag_positions,
    format_prm_input,
    prm_tag_logits,
    step_scores,
    step_tag_ids,
)
from .registry import MODEL_CLASSES, build_model
from .sharding import DEFAULT_RULES, AxisRules, batch_sharding, logical_to_spec, make_mesh, param_shardings, shard_model
from .transformer import CausalLM, KVCache, init_cache
