"""Llama architecture (Llama 2/3, SmolLM2): GQA without q/k/v bias (unless ``attention_bias``, which biases o_proj too),
RoPE, RMSNorm, SwiGLU. llama.cpp stores its Q/K rows permuted for interleaved RoPE; the GGUF loader undoes it."""

from __future__ import annotations

from flax import nnx

from .architecture import (
    Architecture,
    BlockOptions,
    CheckpointNames,
    gguf_decoder_fields,
    hf_decoder_dict,
    hf_decoder_fields,
)
from .config import ModelConfig
from .transformer import CausalLM

BLOCK = BlockOptions(o_proj_bias=True)

HF_NAMES = CheckpointNames(
    embed="model.embed_tokens",
    final_norm="model.norm",
    lm_head="lm_head",
    layer="model.layers.{i}",
    modules={
        name: name
        for name in (
            "input_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "post_attention_layernorm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    },
)

# llama.cpp's names (gguf-py ``MODEL_TENSOR`` / ``TENSOR_NAMES``) for the llama architecture.
GGUF_NAMES = CheckpointNames(
    embed="token_embd",
    final_norm="output_norm",
    lm_head="output",
    layer="blk.{i}",
    modules={
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    },
)


class LlamaForCausalLM(CausalLM):
    """Flax NNX port of ``transformers.LlamaForCausalLM`` (default RoPE only)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.model_type != "llama":
            raise ValueError("LlamaForCausalLM needs model_type='llama'")
        super().__init__(cfg, block=BLOCK, rngs=rngs)


def _parse_hf(d) -> dict:
    return hf_decoder_fields(d) | dict(attention_bias=bool(d.get("attention_bias", False)))


def _emit_hf(cfg: ModelConfig) -> dict:
    return hf_decoder_dict(cfg, "LlamaForCausalLM") | dict(attention_bias=cfg.attention_bias, mlp_bias=cfg.mlp_bias)


def _parse_gguf(meta, tensor_names: frozenset[str]) -> dict:
    bias = f"{GGUF_NAMES.layer.format(i=0)}.{GGUF_NAMES.modules['self_attn.q_proj']}.bias" in tensor_names
    return gguf_decoder_fields(meta, tensor_names, GGUF_NAMES) | dict(model_type="llama", attention_bias=bias)


LLAMA = Architecture(
    model_type="llama",
    hf_architecture="LlamaForCausalLM",
    gguf_architecture="llama",
    model_class=LlamaForCausalLM,
    block=BLOCK,
    hf_names=HF_NAMES,
    gguf_names=GGUF_NAMES,
    gguf_qk_permuted=True,
    parse_hf=_parse_hf,
    emit_hf=_emit_hf,
    parse_gguf=_parse_gguf,
)
