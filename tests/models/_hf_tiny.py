"""Tiny randomly initialised transformers Qwen2/Llama models saved to a directory (parity and I/O tests)."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from flax import nnx

BASE = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


def hf_config(family: str, **overrides):
    """A tiny ``Qwen2Config`` / ``LlamaConfig``; ``overrides`` replace the base fields."""
    kw = dict(BASE, **overrides)
    if family == "qwen2":
        return transformers.Qwen2Config(**kw)
    if family == "llama":
        return transformers.LlamaConfig(**kw)
    raise ValueError(family)


def make_hf_model(family: str, seed: int = 0, **overrides):
    """Random fp32 HF causal LM in eval mode (eager attention); biases randomised too so they matter."""
    torch.manual_seed(seed)
    cfg = hf_config(family, **overrides)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                # default init makes biases 0 and norms 1: perturb so that a dropped/misplaced one shows
                p.add_(0.1 * torch.randn_like(p))
    return model


def save_hf_model(model, path) -> str:
    """``save_pretrained`` into ``path`` and return it as a string."""
    model.save_pretrained(str(path))
    return str(path)


def hf_logits(model, ids, mask=None):
    """fp32 numpy logits of a HF model."""
    with torch.no_grad():
        out = model(
            input_ids=torch.as_tensor(ids), attention_mask=None if mask is None else torch.as_tensor(mask).long()
        )
    return out.logits.float().numpy()


@nnx.jit
def _forward(model, ids, mask):
    return model(ids, mask)


def jax_logits(model, ids, mask=None):
    """Our model's logits as numpy, through one jitted forward per shape (much cheaper than eager on CPU)."""
    ids = np.asarray(ids, np.int32)
    return np.asarray(_forward(model, ids, np.ones(ids.shape, bool) if mask is None else np.asarray(mask, bool)))
