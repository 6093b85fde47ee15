"""Rollouts of the RL stage: sample completions with the JAX sampler and score them, host work overlapped.

Generation runs in chunks of prompts; as soon as a chunk is sampled its host work (decoding with token
offsets, SQL execution through the worker pool, EXPO-SQL clause rewards) is handed to a single background
thread while the device samples the next chunk. The pool's workers are separate processes, so the SQL
executions really run in parallel with sampling. PRM scoring runs on the device after the last chunk
(it would only queue behind sampling). Across RL steps nothing overlaps: step i+1 samples from the params
step i produced (on-policy, as the paper's GRPO), so it cannot start before step i's rewards exist.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np

from rewardsql_jax.rewards.rollout_rewards import (DecodedCompletion, Outcomes, batch_clause_rewards,
                                                   clause_reward_options, decode_with_offsets, execution_outcomes)
from rewardsql_jax.sampling import generate


@dataclasses.dataclass(frozen=True)
class HostScores:
    """Host-side results for a list of rows: decoded completions, outcomes, clause rewards (or None)."""

    completions: list
    outcomes: Outcomes
    clauses: list | None


@dataclasses.dataclass(frozen=True)
class Rollouts:
    """Rows prompt-major (``samples`` consecutive rows per prompt). ``prompt_ids[r]``, ``token_ids[r]``
    (EOS included when generated), ``logprobs[r]`` (sampler, temperature-scaled), ``records[r]`` (the
    question), host scores, the number of generated tokens and the sampling / waiting seconds."""

    prompt_ids: list
    token_ids: list
    logprobs: list
    records: list
    completions: list
    outcomes: Outcomes
    clauses: list | None
    tokens: int
    sample_seconds: float
    wait_seconds: float


def score_rows(tokenizer, pool, records, token_ids, *, clauses: bool, timeout_s: float = 30.0,
               ex_mode: str = "bird") -> HostScores:
    """Decode rows with offsets, execute them against their gold SQL under the run's EX rule ``ex_mode``, and
    (``clauses``) EXPO-SQL clause rewards with the same match rule."""
    eos = [tokenizer.eos_token_id]
    comps: list[DecodedCompletion] = [decode_with_offsets(tokenizer, t, eos) for t in token_ids]
    dbs, golds = [r["db_path"] for r in records], [r["gold_sql"] for r in records]
    preds = [c.text for c in comps]
    out = execution_outcomes(pool, dbs, preds, golds, timeout_s=timeout_s, mode=ex_mode)
    cl = batch_clause_rewards(pool, dbs, preds, golds, out, timeout_s=timeout_s,
                              options=clause_reward_options(ex_mode)) if clauses else None
    return HostScores(comps, out, cl)


def _concat(parts: Sequence[HostScores]) -> HostScores:
    o = [p.outcomes for p in parts]
    outcomes = Outcomes(rewards=np.concatenate([x.rewards for x in o]),
                        executable=np.concatenate([x.executable for x in o]),
                        gold_ok=np.concatenate([x.gold_ok for x in o]),
                        results=tuple(r for x in o for r in x.results))
    clauses = None if parts[0].clauses is None else [c for p in parts for c in p.clauses]
    return HostScores([c for p in parts for c in p.completions], outcomes, clauses)


def sample_rollouts(model, tokenizer, records, prompt_ids, *, samples: int, temperature: float, max_new_tokens: int,
                    seed: int, host_fn: Callable[[list, list], HostScores], prompts_per_call: int,
                    max_cache_len: int | None = None) -> Rollouts:
    """Sample ``samples`` completions of every prompt from ``model`` and score them with ``host_fn(records,
    token_ids)`` in a background thread, chunk by chunk (module docstring)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows_p, rows_t, rows_l, rows_r, futures = [], [], [], [], []
    t_sample = 0.0
    with ThreadPoolExecutor(max_workers=1) as host:
        for c, start in enumerate(range(0, len(prompt_ids), prompts_per_call)):
            chunk = prompt_ids[start:start + prompts_per_call]
            t0 = time.perf_counter()
            res = generate(model, chunk, max_new_tokens=max_new_tokens, temperature=temperature, num_samples=samples,
                           eos_token_id=tokenizer.eos_token_id, seed=seed * 7919 + c, pad_id=pad,
                           max_cache_len=max_cache_len)
            t_sample += time.perf_counter() - t0
            recs = [records[start + i // samples] for i in range(len(res.tokens))]
            rows_p += [chunk[i // samples] for i in range(len(res.tokens))]
            rows_t += res.tokens
            rows_l += res.logprobs
            rows_r += recs
            futures.append(host.submit(host_fn, recs, res.tokens))
        t0 = time.perf_counter()
        scores = _concat([f.result() for f in futures])
        wait = time.perf_counter() - t0
    return Rollouts(prompt_ids=rows_p, token_ids=rows_t, logprobs=rows_l, records=rows_r,
                    completions=scores.completions, outcomes=scores.outcomes, clauses=scores.clauses,
                    tokens=sum(len(t) for t in rows_t), sample_seconds=t_sample, wait_seconds=wait)
