"""Per-device memory of the models the sampling / scoring phases hold, counted without compiling.

The sampling stages (PRM labels, inference) and the RL stage's PRM scorer load their models sharded over each
process's local devices (an fsdp-style mesh of all of the host's devices, ``host_sampling_mesh``), by the same logical-axis
rules as training; their batch rows are spread over those devices. What one device holds:

* weights: the shard shapes of the abstract parameters under the rules table (``weight_bytes``; exact, nothing
  compiled), in the dtype the stages load them in.
* the sampler's KV cache (``sampler_cache_bytes``), in the compute dtype, ``2 (K, V) x layers x kv_heads x
  head_dim x itemsize`` bytes per cached token:
    prompt cache     ``ceil(prompts / shards)`` prompt rows of ``prompt_width(prompt_len)`` slots (each prompt once);
    generated cache  ``ceil(prompts / shards) x samples`` rows of ``gen_capacity`` slots (``new_tokens`` rounded up
                     to 16): the sampler lays it out over the rows (``SamplerOptions.mesh``) from the prefill on,
                     and the decode loop takes it donated, so one copy.
* activations of a no-grad forward (``forward_activation_bytes``): an upper bound of one layer's live arrays,
  every row counted on every device.

``tests/planning/test_sampling_memory.py`` checks these against a small model's real arrays on 8 simulated devices.
"""

from __future__ import annotations

import jax
from flax import nnx

from rewardsql_jax.models.config import ModelConfig, resolve_dtype
from rewardsql_jax.models.lora import LoRAParam
from rewardsql_jax.models.registry import build_model
from rewardsql_jax.models.sharding import make_mesh, param_shardings
from rewardsql_jax.sampling.inputs import GEN_ROUND, prompt_width

from .aot import shard_bytes
from .devices import planning_devices

QUERY_CHUNK, MAX_QUERY_CHUNKS = 128, 8  # models.attention_math.causal_attention_in_query_chunks defaults


def host_sampling_mesh(local_devices: int, devices=None):
    """The fsdp-style mesh of one host's devices (data=1 x fsdp=all x tensor=1) sampling-stage models use."""
    return make_mesh(1, local_devices, 1, devices=planning_devices(local_devices, devices))


def _row_shards(mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]


def _per_device_rows(rows: int, mesh) -> int:
    """Rows one device holds when ``rows`` are padded to a multiple of the data x fsdp devices and split."""
    return -(-rows // _row_shards(mesh))


def weight_bytes(cfg: ModelConfig, mesh) -> int:
    """Bytes of ``cfg``'s parameters (in ``cfg.param_dtype``) one device holds under the rules table on ``mesh``."""
    state = nnx.state(nnx.eval_shape(lambda: build_model(cfg)))
    return shard_bytes(state, param_shardings(state, mesh))


def adapter_bytes(cfg: ModelConfig, mesh) -> int:
    """Bytes of the LoRA adapters of ``cfg`` (``cfg.lora``) one device holds on ``mesh``; 0 without adapters."""
    state = nnx.state(nnx.eval_shape(lambda: build_model(cfg)), LoRAParam)
    return shard_bytes(state, param_shardings(state, mesh))


def gen_capacity(new_tokens: int) -> int:
    """Slots of the generated-token cache: ``new_tokens`` rounded up to 16 (``sampling.inputs.GEN_ROUND``)."""
    return -(-new_tokens // GEN_ROUND) * GEN_ROUND


def bytes_per_cached_token(cfg: ModelConfig) -> int:
    """K and V of every layer for one token in the compute dtype."""
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * resolve_dtype(cfg.dtype).itemsize


def sampler_cache_bytes(cfg: ModelConfig, mesh, *, prompts: int, samples: int, prompt_len: int, new_tokens: int) -> int:
    """Per-device KV cache of one sampler call of ``prompts`` prompts x ``samples`` samples (module docstring)."""
    prompt_rows = _per_device_rows(prompts, mesh)  # the prompts padded to a multiple of the shards, split
    prompt_slots = prompt_rows * prompt_width(prompt_len)
    generated = prompt_rows * samples * gen_capacity(new_tokens)
    return bytes_per_cached_token(cfg) * (prompt_slots + generated)


def forward_activation_bytes(cfg: ModelConfig, *, rows: int, seq: int, logits_rows: int = 0) -> int:
    """Upper bound of the live activations per device of a no-grad forward of ``rows x seq`` tokens, one layer at
    a time, with every row counted on every device:

        rows x seq x (4 H + (Hq + 2 Hkv) D + 3 I) x itemsize      residual / norm / attention output, q k v,
                                                                   gate / up / SwiGLU product (compute dtype)
      + 2 x rows x Hq x chunk x seq x 4                           fp32 scores and their exp of one query chunk
      + 2 x logits_rows x V x 4                                   fp32 last-position logits and their softmax

    with ``chunk = max(128, ceil(seq / 8))`` (the query chunks of the causal attention). Rows are not divided
    over the devices: the sampler's prefill compiled for an 8-device fsdp mesh keeps ~3x the row-sharded count
    live (measured on a small model, ``tests/planning/test_sampling_memory.py``), so only the unsharded count is
    a bound."""
    size = resolve_dtype(cfg.dtype).itemsize
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    chunk = min(seq, max(QUERY_CHUNK, -(-seq // MAX_QUERY_CHUNKS)))
    layer = rows * seq * (4 * h + (hq + 2 * hkv) * d + 3 * i) * size
    scores = 2 * rows * hq * chunk * seq * 4
    return layer + scores + 2 * logits_rows * cfg.vocab_size * 4


def loaded_config(cfg: ModelConfig, dtype: str) -> ModelConfig:
    """``cfg`` as the stages load a checkpoint with ``from_pretrained(path, dtype=model.dtype)``: weights stored and
    computed in ``dtype`` (``stages.policy.load_model``)."""
    name = jax.numpy.dtype(resolve_dtype(dtype)).name
    return cfg.replace(param_dtype=name, dtype=name)
