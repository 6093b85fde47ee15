"""Batched SQL generation from prompts with the JAX sampler (chunked, with a progress bar)."""

from __future__ import annotations

import dataclasses

from tqdm.auto import tqdm

from rewardsql_jax.sampling import generate
from rewardsql_jax.sampling.inputs import pad_id


@dataclasses.dataclass(frozen=True)
class Completions:
    """``texts[i][j]`` / ``token_ids[i][j]`` / ``logprobs[i][j]``: sample j of prompt i."""

    texts: list
    token_ids: list
    logprobs: list


def generate_sql(
    model,
    tokenizer,
    prompts,
    *,
    num_samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 160,
    seed: int | list[int] = 0,
    prompts_per_call: int = 8,
    desc: str = "generate",
    progress: bool = True,
    stop_token_ids: tuple[int, ...] = (),
) -> Completions:
    """Sample ``num_samples`` completions per prompt (raw prompts, Reward-SQL style), decoded to text.

    ``seed``: one int (call ``c`` of ``prompts_per_call`` prompts is drawn with ``seed + c``), or one seed a
    prompt, so that a prompt's samples do not depend on the prompts beside it in a call. ``stop_token_ids``: ids
    besides the tokenizer's EOS after which a row stops; unlike EOS they stay in the decoded text."""
    if not isinstance(seed, int) and len(seed) != len(prompts):
        raise ValueError(f"generate_sql: {len(seed)} seeds for {len(prompts)} prompts (one int, or one a prompt)")
    pad = pad_id(tokenizer)
    stops = [e for e in (tokenizer.eos_token_id, *stop_token_ids) if e is not None]
    texts, ids, lps = [], [], []
    chunks = range(0, len(prompts), prompts_per_call)
    for c, start in enumerate(tqdm(chunks, desc=desc, disable=not progress)):
        chunk = prompts[start : start + prompts_per_call]
        encoded = [tokenizer(p, add_special_tokens=False).input_ids for p in chunk]
        res = generate(
            model,
            encoded,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            num_samples=num_samples,
            eos_token_id=stops,
            seed=seed + c if isinstance(seed, int) else list(seed[start : start + prompts_per_call]),
            pad_id=pad,
        )
        for i in range(len(chunk)):
            rows = range(i * num_samples, (i + 1) * num_samples)
            toks = [[t for t in res.tokens[r] if t != tokenizer.eos_token_id] for r in rows]
            ids.append([res.tokens[r] for r in rows])
            lps.append([res.logprobs[r] for r in rows])
            texts.append([tokenizer.decode(t, skip_special_tokens=True).strip() for t in toks])
    return Completions(texts=texts, token_ids=ids, logprobs=lps)
