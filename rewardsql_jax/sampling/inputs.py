"""Checking ``generate``'s arguments and left-padding prompts into one bucketed batch (host side)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


def pad_id(tokenizer) -> int:
    """The id that pads a batch for ``tokenizer``: its pad token, else its eos token (many causal LMs have no pad)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


# prompts per sampler call of the stages that sample in fixed-size calls (inference, PRM labelling): every call
# has one shape (the last padded), and the memory plan sizes their sampler at it
PROMPTS_PER_CALL = 8
GEN_ROUND = 16  # generation capacity is rounded up to this, so nearby max_new_tokens share a compile
PREFIX_ROUND = 32  # a shared prompt prefix is cut down to a multiple of this (few prefill shapes)
SUFFIX_ROUND = 32  # what follows a shared prefix is padded up to a multiple of this


def prompt_width(n: int) -> int:
    """Padded prompt length for a longest prompt of ``n`` tokens: the next power of two (at least
    16) up to 512, then the next multiple of 512. Few distinct shapes -> few recompiles."""
    if n <= 512:
        return max(16, 1 << (n - 1).bit_length())
    return -(-n // 512) * 512


def shared_prefix_length(prompts: Sequence[Sequence[int]], multiple: int = PREFIX_ROUND) -> int:
    """How many leading tokens every prompt shares, rounded down to a multiple of ``multiple``, leaving each
    prompt at least one token of its own (the sampler prefills the shared part once). 0 for fewer than two
    prompts or a shared part shorter than ``multiple``."""
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = np.asarray(prompts[0][:n])
    for p in prompts[1:]:
        differs = np.flatnonzero(np.asarray(p[:n]) != first[:n])
        n = int(differs[0]) if differs.size else n
    return n // multiple * multiple


def normalize_eos(eos_token_id) -> tuple[int, ...]:
    """``None`` | int | sequence of ints -> tuple of ints."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, (int, np.integer)):
        return (int(eos_token_id),)
    ids = tuple(int(e) for e in eos_token_id)
    return ids


def check_options(*, max_new_tokens, temperature, top_p, top_k, num_samples) -> None:
    """Raise ``ValueError`` naming the bad sampling option and its valid range."""
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 disables nucleus filtering), got {top_p!r}")
    if not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 disables top-k filtering), got {top_k!r}")
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")


@dataclasses.dataclass(frozen=True)
class PaddedBatch:
    """Each distinct prompt once, left-padded to ``ids.shape[1]``; the sampler prefills them once and
    repeats the KV cache ``num_samples`` times (rows prompt-major).

    ``cache_len`` = padded prompt length + ``gen_capacity`` (the output buffer width)."""

    ids: np.ndarray  # [N, P] int32, one row per prompt (after ``prefix`` when there is one)
    mask: np.ndarray  # [N, P] bool, True on real tokens
    lengths: np.ndarray  # [N] int32, whole prompts (prefix included)
    cache_len: int
    gen_capacity: int
    num_samples: int = 1
    prefix: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))  # [C] shared by every prompt


def _as_prompt_list(prompt_ids) -> list[list[int]]:
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim == 2:
        return [list(map(int, row)) for row in prompt_ids]
    if not isinstance(prompt_ids, Sequence) and not isinstance(prompt_ids, np.ndarray):
        raise ValueError(
            f"prompt_ids must be a list of prompts (each a list of token ids), got {type(prompt_ids).__name__}"
        )
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids is empty; pass at least one prompt (a list of token ids)")
    if isinstance(prompt_ids[0], (int, np.integer)):
        raise ValueError("prompt_ids must be a list of prompts, got a flat list of ints; for one prompt pass [ids]")
    prompts = [list(map(int, np.asarray(p).reshape(-1))) for p in prompt_ids]
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token (e.g. a BOS token)")
    return prompts


def _left_pad(prompts: list[list[int]], width: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``[N, width]`` ids and real-token mask, each prompt right-aligned (the last slot is its last token)."""
    ids = np.full((len(prompts), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(prompts), width), dtype=bool)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = p
        mask[r, width - len(p) :] = True
    return ids, mask


def pad_prompts(
    prompt_ids,
    *,
    num_samples: int,
    pad_id: int,
    max_new_tokens: int,
    max_cache_len,
    max_positions: int,
    vocab_size: int,
    share_prefix: bool = False,
) -> PaddedBatch:
    """Validate prompts against the model and cache limits and build the left-padded batch. ``share_prefix``
    (without ``max_cache_len``): the leading tokens every prompt shares (``shared_prefix_length``) go to
    ``prefix``, once, and ``ids`` hold the rest of each prompt, padded to a multiple of ``SUFFIX_ROUND``."""
    prompts = _as_prompt_list(prompt_ids)
    for i, p in enumerate(prompts):
        lo, hi = min(p), max(p)
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"prompt {i} has token id {lo if lo < 0 else hi} outside the vocabulary [0, {vocab_size})")
    if not 0 <= pad_id < vocab_size:
        raise ValueError(f"pad_id {pad_id} is outside the vocabulary [0, {vocab_size})")
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > max_positions:
        raise ValueError(
            f"longest prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"max_position_embeddings ({max_positions}); shorten the prompt or lower max_new_tokens"
        )
    shared = shared_prefix_length(prompts) if share_prefix and max_cache_len is None else 0
    if shared:
        prefix = np.asarray(prompts[0][:shared], np.int32)
        full_lengths = [len(p) for p in prompts]
        prompts = [p[shared:] for p in prompts]
        width = -(-max(len(p) for p in prompts) // SUFFIX_ROUND) * SUFFIX_ROUND
        capacity = -(-max_new_tokens // GEN_ROUND) * GEN_ROUND
        ids, mask = _left_pad(prompts, width, pad_id)
        return PaddedBatch(
            ids=ids,
            mask=mask,
            lengths=np.asarray(full_lengths, np.int32),
            cache_len=shared + width + capacity,
            gen_capacity=capacity,
            num_samples=num_samples,
            prefix=prefix,
        )
    if max_cache_len is None:
        width = prompt_width(longest)
        capacity = -(-max_new_tokens // GEN_ROUND) * GEN_ROUND
    else:
        if longest + max_new_tokens > max_cache_len:
            raise ValueError(
                f"longest prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) does not fit in "
                f"max_cache_len={max_cache_len}; raise max_cache_len or shorten the prompt / max_new_tokens"
            )
        width = min(prompt_width(longest), max_cache_len - max_new_tokens)
        capacity = max_cache_len - width
    ids, mask = _left_pad(prompts, width, pad_id)
    lengths = np.array([len(p) for p in prompts], dtype=np.int32)
    return PaddedBatch(
        ids=ids, mask=mask, lengths=lengths, cache_len=width + capacity, gen_capacity=capacity, num_samples=num_samples
    )
