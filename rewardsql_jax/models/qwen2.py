"""Qwen2 architecture (Qwen2.5, Qwen2.5-Coder): GQA with q/k/v bias and none on o_proj, RoPE theta from the config, tied
or untied embeddings. Tensor names are Llama's in both formats; llama.cpp does not permute Qwen2's Q/K rows (it
runs Qwen2 with NEOX, i.e. rotate-half, RoPE)."""

from __future__ import annotations

from flax import nnx

from .architecture import Architecture, BlockOptions, gguf_decoder_fields, hf_decoder_dict, hf_decoder_fields
from .config import ModelConfig
from .llama import GGUF_NAMES, HF_NAMES
from .transformer import CausalLM

BLOCK = BlockOptions(o_proj_bias=False)


class Qwen2ForCausalLM(CausalLM):
    """Flax NNX port of ``transformers.Qwen2ForCausalLM`` (q/k/v projections carry a bias, o_proj none)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.model_type != "qwen2" or not cfg.attention_bias:
            raise ValueError("Qwen2ForCausalLM needs model_type='qwen2' with attention_bias=True")
        super().__init__(cfg, block=BLOCK, rngs=rngs)


def _parse_hf(d) -> dict:
    return hf_decoder_fields(d) | dict(attention_bias=True)


def _emit_hf(cfg: ModelConfig) -> dict:
    return hf_decoder_dict(cfg, "Qwen2ForCausalLM") | dict(use_sliding_window=False)


def _parse_gguf(meta, tensor_names: frozenset[str]) -> dict:
    return gguf_decoder_fields(meta, tensor_names, GGUF_NAMES) | dict(model_type="qwen2", attention_bias=True)


QWEN2 = Architecture(
    model_type="qwen2",
    hf_architecture="Qwen2ForCausalLM",
    gguf_architecture="qwen2",
    model_class=Qwen2ForCausalLM,
    block=BLOCK,
    hf_names=HF_NAMES,
    gguf_names=GGUF_NAMES,
    gguf_qk_permuted=False,
    parse_hf=_parse_hf,
    emit_hf=_emit_hf,
    parse_gguf=_parse_gguf,
)
