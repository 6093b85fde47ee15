"""Flax NNX decoder models (Qwen2, Llama architectures), HF and GGUF checkpoint I/O, sharding rules, PRM head."""

from .adapters import adapter_state, add_adapters, has_adapters, merge_adapters, without_adapters
from .config import ModelConfig
from .fresh import fresh_config, fresh_model
from .hf import save_pretrained
from .lora import LoRAConfig, LoRAParam
from .lora_io import load_adapters, save_adapters
from .pretrained import from_pretrained, pretrained_config
from .prm_head import (
    StepTags,
    TagPositions,
    find_tag_positions,
    format_prm_input,
    prm_tag_logits,
    step_scores,
    step_tag_ids,
)
from .registry import (
    ARCHITECTURES,
    MODEL_CLASSES,
    architecture_of,
    build_model,
    config_from_hf,
    config_to_hf,
    hf_key_table,
)
from .sharding import DEFAULT_RULES, AxisRules, batch_sharding, logical_to_spec, make_mesh, param_shardings, shard_model
from .transformer import CausalLM, KVCache, init_cache
