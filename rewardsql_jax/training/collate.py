"""Collate: token rows -> fixed-shape train batches (host side, numpy), for every trainer of the library.

Encoding and padding (``encode_pair``, ``pad_rows``, ``bucket_length``, ``batch_indices``) and the batches of the
RL algorithms: ``RLBatch`` / ``GroupedRLBatch`` (policy-gradient), ``PreferenceBatch`` (DPO), ``SFTBatch`` (SFT,
rejection sampling). Every row is ``prompt + completion`` right-padded to one ``length`` (``rl_length``), so a
jitted step compiles once per run. Per-token fields follow ``batch``'s token-aligned convention: position
``len(prompt) + k`` holds completion token k, its sampling log-prob and its advantage / reward.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .batch import GroupedRLBatch, PreferenceBatch, RLBatch, SFTBatch


def bucket_length(n: int, multiple: int = 64) -> int:
    """Round ``n`` up to a multiple of ``multiple`` so jitted steps see few distinct shapes."""
    return max(multiple, -(-n // multiple) * multiple)


def length_ladder(needs: Sequence[int], levels: int, multiple: int = 64) -> list[int]:
    """At most ``levels`` padded lengths for a run whose step i needs ``needs[i]`` tokens: the needs' quantiles
    k / ``levels`` (k = 1 .. ``levels``) rounded up to ``multiple``, ascending; the last holds the longest step.
    Each step pads to the first that holds it (``ladder_length``): fewer padded tokens than one length for the
    whole run, at the price of one compile per length used."""
    if levels < 1 or not len(needs):
        raise ValueError(f"a length ladder needs levels >= 1 (got {levels}) and at least one step's length")
    quantiles = np.quantile(np.asarray(needs), np.arange(1, levels + 1) / levels, method="higher")
    return sorted({bucket_length(int(q), multiple) for q in quantiles})


def ladder_length(need: int, ladder: Sequence[int]) -> int:
    """The shortest length of ``ladder`` (``length_ladder``) that holds ``need`` tokens."""
    return next(n for n in ladder if n >= need)


def target_token_bound(loss_masks) -> int:
    """The ``target_tokens`` bound of a run's supervised rows: the most loss tokens of any row, in 16s (one shape;
    the vocabulary projection runs at those positions only)."""
    return -(-max(sum(m) for m in loss_masks) // 16) * 16


def encode_pair(tokenizer, prompt: str, target: str, *, add_eos: bool = True) -> tuple[list[int], list[int]]:
    """(ids, loss_mask): prompt tokens masked out, target tokens (+ EOS) in the loss."""
    p = tokenizer(prompt, add_special_tokens=False).input_ids
    t = tokenizer(target, add_special_tokens=False).input_ids
    if add_eos:
        t = t + [tokenizer.eos_token_id]
    return p + t, [0] * len(p) + [1] * len(t)


def pad_rows(rows, length: int, pad_id: float, dtype=np.int32) -> np.ndarray:
    """Right-pad lists to ``[len(rows), length]``."""
    out = np.full((len(rows), length), pad_id, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
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
        yield order[s * batch_size : (s + 1) * batch_size]


def rl_length(max_prompt_tokens: int, max_new_tokens: int) -> int:
    """The one padded length of every RL row: longest prompt + completion budget, bucketed."""
    return bucket_length(max_prompt_tokens + max_new_tokens)


def _check_rows(prompts, completions, length):
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions; give one prompt per row")
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if len(p) + len(c) > length:
            raise ValueError(
                f"row {i}: prompt ({len(p)}) + completion ({len(c)}) tokens exceed the batch length {length}"
            )


def _place(rows_prompt, rows_values, length, fill, dtype):
    out = np.full((len(rows_prompt), length), fill, dtype)
    for i, (p, v) in enumerate(zip(rows_prompt, rows_values)):
        out[i, len(p) : len(p) + len(v)] = v
    return out


def sequence_arrays(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], length: int, pad_id: int):
    """(input_ids, attention_mask, completion_mask) [B, length] of prompt + completion rows."""
    _check_rows(prompts, completions, length)
    ids = np.full((len(prompts), length), pad_id, np.int32)
    attn = np.zeros((len(prompts), length), np.int32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = list(p) + list(c)
        attn[i, : len(p) + len(c)] = 1
    done = _place(prompts, [np.ones(len(c)) for c in completions], length, 0, np.int32)
    return ids, attn, done


def rl_batch(
    prompts,
    completions,
    logprobs,
    *,
    length: int,
    pad_id: int,
    advantages=None,
    token_values=None,
    field: str = "advantages",
) -> RLBatch:
    """RLBatch of sampled rows. ``advantages`` [B] (per sequence: outcome GRPO) or ``token_values`` (one [T_i]
    array per row, aligned with its completion tokens) go to ``field``: "advantages" (grpo loss) or
    "token_rewards" (reinforce_pp loss). ``logprobs`` are the sampler's, which become ``old_logprobs``."""
    if (advantages is None) == (token_values is None):
        raise ValueError("give exactly one of advantages ([B], per sequence) or token_values (per token)")
    if field not in ("advantages", "token_rewards"):
        raise ValueError(f"field={field!r}: use 'advantages' or 'token_rewards'")
    ids, attn, comp = sequence_arrays(prompts, completions, length, pad_id)
    old = _place(prompts, logprobs, length, 0.0, np.float32)
    if token_values is not None:
        bad = [i for i, (v, c) in enumerate(zip(token_values, completions)) if len(v) != len(c)]
        if bad:
            raise ValueError(f"rows {bad[:5]}: token_values must have one value per completion token")
        values = _place(prompts, token_values, length, 0.0, np.float32)
    else:
        values = np.asarray(advantages, np.float32)
        if values.shape != (len(prompts),):
            raise ValueError(f"advantages must be [{len(prompts)}] (one per row), got shape {values.shape}")
        if field == "token_rewards":
            raise ValueError("token_rewards are per token: pass token_values")
    return RLBatch(
        input_ids=ids, attention_mask=attn, completion_mask=comp, old_logprobs=old, **{field: values}
    ).validate()


def grouped_rl_batch(
    prompts,
    completions,
    logprobs,
    *,
    group: int,
    prompt_length: int,
    completion_length: int,
    pad_id: int,
    advantages=None,
    token_values=None,
    field: str = "advantages",
) -> GroupedRLBatch:
    """GroupedRLBatch of ``len(prompts)`` prompts with ``group`` completions each (``completions``,
    ``logprobs``, ``advantages`` / ``token_values`` prompt-major, one per completion, as for ``rl_batch``).
    Prompts are left-padded to ``prompt_length``, completions right-padded to ``completion_length``; the
    train step computes each prompt once (``models.shared_prefix``)."""
    if (advantages is None) == (token_values is None):
        raise ValueError("give exactly one of advantages (per sequence) or token_values (per token)")
    if field not in ("advantages", "token_rewards"):
        raise ValueError(f"field={field!r}: use 'advantages' or 'token_rewards'")
    n = len(prompts)
    if len(completions) != n * group or len(logprobs) != n * group:
        raise ValueError(
            f"{n} prompts x group {group} needs {n * group} completions and logprob rows, got "
            f"{len(completions)} and {len(logprobs)} (prompt-major)"
        )
    long_p = max((len(p) for p in prompts), default=0)
    long_c = max((len(c) for c in completions), default=0)
    if long_p > prompt_length or long_c > completion_length:
        raise ValueError(
            f"longest prompt {long_p} / completion {long_c} exceed prompt_length={prompt_length} / "
            f"completion_length={completion_length}"
        )
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    p_ids = np.full((n, prompt_length), pad_id, np.int32)
    p_mask = np.zeros((n, prompt_length), np.int32)
    for i, p in enumerate(prompts):
        p_ids[i, prompt_length - len(p) :] = p
        p_mask[i, prompt_length - len(p) :] = 1
    start = [()] * len(completions)  # completion-aligned: every row starts at 0
    c_ids = _place(start, completions, completion_length, pad_id, np.int32)
    c_mask = _place(start, [np.ones(len(c)) for c in completions], completion_length, 0, np.int32)
    old = _place(start, logprobs, completion_length, 0.0, np.float32)

    def grouped(x):
        return x.reshape(n, group, *x.shape[1:])

    if token_values is not None:
        bad = [i for i, (v, c) in enumerate(zip(token_values, completions)) if len(v) != len(c)]
        if bad:
            raise ValueError(f"rows {bad[:5]}: token_values must have one value per completion token")
        values = grouped(_place(start, token_values, completion_length, 0.0, np.float32))
    else:
        if field == "token_rewards":
            raise ValueError("token_rewards are per token: pass token_values")
        values = np.asarray(advantages, np.float32)
        if values.shape != (n * group,):
            raise ValueError(f"advantages must be [{n * group}] (one per completion), got shape {values.shape}")
        values = values.reshape(n, group)
    return GroupedRLBatch(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        completion_ids=grouped(c_ids),
        completion_mask=grouped(c_mask),
        old_logprobs=grouped(old),
        **{field: values},
    ).validate()


def preference_batch(prompts, chosen, rejected, *, length: int, pad_id: int) -> PreferenceBatch:
    """PreferenceBatch of (prompt, chosen completion, rejected completion) rows; loss masks cover completions."""
    c_ids, c_attn, c_mask = sequence_arrays(prompts, chosen, length, pad_id)
    r_ids, r_attn, r_mask = sequence_arrays(prompts, rejected, length, pad_id)
    return PreferenceBatch(
        chosen_input_ids=c_ids,
        chosen_attention_mask=c_attn,
        chosen_loss_mask=c_mask,
        rejected_input_ids=r_ids,
        rejected_attention_mask=r_attn,
        rejected_loss_mask=r_mask,
    ).validate()


def sft_batch(prompts, completions, *, length: int, pad_id: int) -> SFTBatch:
    """SFTBatch on completions (rejection sampling: maximum likelihood of the kept candidates)."""
    ids, attn, mask = sequence_arrays(prompts, completions, length, pad_id)
    return SFTBatch(input_ids=ids, attention_mask=attn, loss_mask=mask).validate()


def masked_rl_batch(rows, advantages, pad_id: int) -> RLBatch:
    """RLBatch of whole token rows ``(ids, completion_mask, logprobs)`` whose trained tokens are marked by the
    mask rather than by a prompt/completion split (SQLConductor Sec. 4.4: a multi-step trajectory where only the
    policy's ``<reasoning>``/``<call>`` tokens are trained and the ``<results>`` between them are not); the
    log-probs are the sampler's (0 where not sampled), ``advantages`` one per row [B], or one sequence per row with
    a value per token (padded with 0); length ``bucket_length``."""
    rows = [(list(ids), list(mask), list(lps)) for ids, mask, lps in rows]
    per_token = len(advantages) > 0 and np.ndim(advantages[0]) == 1
    bad = [
        i
        for i, (ids, mask, lps) in enumerate(rows)
        if not len(ids) == len(mask) == len(lps) or (per_token and len(advantages[i]) != len(ids))
    ]
    if bad:
        raise ValueError(
            f"rows {bad[:5]}: ids, completion_mask, logprobs (and per-token advantages) must have one entry per token"
        )
    length = bucket_length(max(len(ids) for ids, _, _ in rows))
    return RLBatch(
        input_ids=pad_rows([ids for ids, _, _ in rows], length, pad_id),
        attention_mask=pad_rows([[1] * len(ids) for ids, _, _ in rows], length, 0),
        completion_mask=pad_rows([m for _, m, _ in rows], length, 0),
        old_logprobs=pad_rows([lp for _, _, lp in rows], length, 0.0, dtype=np.float32),
        advantages=(
            pad_rows(advantages, length, 0.0, dtype=np.float32) if per_token else np.asarray(advantages, np.float32)
        ),
    ).validate()
