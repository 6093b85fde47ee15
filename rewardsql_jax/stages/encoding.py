"""Token encoding and fixed-shape padding shared by the training stages (host side, numpy)."""
from __future__ import annotations

import numpy as np


def bucket_length(n: int, multiple: int = 64) -> int:
    """Round ``n`` up to a multiple of ``multiple`` so jitted steps see few distinct shapes."""
    return max(multiple, -(-n // multiple) * multiple)


def encode_pair(tokenizer, prompt: str, target: str, *, add_eos: bool = True) -> tuple[list[int], list[int]]:
    """(ids, loss_mask): prompt tokens masked out, target tokens (+ EOS) in the loss."""
    p = tokenizer(prompt, add_special_tokens=False).input_ids
    t = tokenizer(target, add_special_tokens=False).input_ids
    if add_eos:
        t = t + [tokenizer.eos_token_id]
    return p + t, [0] * len(p) + [1] * len(t)


def pad_rows(rows, length: int, pad_id: int, dtype=np.int32) -> np.ndarray:
    """Right-pad lists to ``[len(rows), length]``."""
    out = np.full((len(rows), length), pad_id, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def sft_arrays(encoded, length: int, pad_id: int):
    """(input_ids, attention_mask, loss_mask) arrays for a list of (ids, loss_mask) pairs."""
    ids = pad_rows([e[0] for e in encoded], length, pad_id)
    attn = pad_rows([[1] * len(e[0]) for e in encoded], length, 0)
    loss = pad_rows([e[1] for e in encoded], length, 0)
    return ids, attn, loss


def batch_indices(n: int, batch_size: int, steps: int, seed: int, start_step: int = 0):
    """Index arrays for ``steps`` batches: epochs of a seeded permutation, deterministic and resumable."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(n) for _ in range(-(-(steps + start_step) * batch_size // n) + 1)])
    for s in range(start_step, start_step + steps):
        yield order[s * batch_size:(s + 1) * batch_size]
