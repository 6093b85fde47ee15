"""Rollouts of the RL algorithms: sample completions with the JAX sampler and score them, host work overlapped.

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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import numpy as np

from rewardsql_jax.distributed import gather_rows, owns_row, process_count
from rewardsql_jax.rewards.rollout_rewards import (
    DecodedCompletion,
    Outcomes,
    batch_clause_rewards,
    clause_reward_options,
    decode_with_offsets,
    execution_outcomes,
)
from rewardsql_jax.sampling import generate
from rewardsql_jax.sampling.inputs import pad_id


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

    def take(self, rows) -> Rollouts:
        """The rollouts of ``rows`` (indices, in that order); timings are kept, the token count recomputed."""
        rows = [int(r) for r in rows]
        o = self.outcomes
        outcomes = Outcomes(
            rewards=o.rewards[rows],
            executable=o.executable[rows],
            gold_ok=o.gold_ok[rows],
            results=tuple(o.results[r] for r in rows),
        )

        def pick(xs):
            return [xs[r] for r in rows]

        return dataclasses.replace(
            self,
            prompt_ids=pick(self.prompt_ids),
            token_ids=pick(self.token_ids),
            logprobs=pick(self.logprobs),
            records=pick(self.records),
            completions=pick(self.completions),
            outcomes=outcomes,
            clauses=None if self.clauses is None else pick(self.clauses),
            tokens=sum(len(self.token_ids[r]) for r in rows),
        )


def concat_rollouts(parts: Sequence[Rollouts]) -> Rollouts:
    """One batch of several rollout batches (rows in order); timings and token counts add up."""
    host = _concat([HostScores(p.completions, p.outcomes, p.clauses) for p in parts])
    return Rollouts(
        prompt_ids=[x for p in parts for x in p.prompt_ids],
        token_ids=[x for p in parts for x in p.token_ids],
        logprobs=[x for p in parts for x in p.logprobs],
        records=[x for p in parts for x in p.records],
        completions=host.completions,
        outcomes=host.outcomes,
        clauses=host.clauses,
        tokens=sum(p.tokens for p in parts),
        sample_seconds=sum(p.sample_seconds for p in parts),
        wait_seconds=sum(p.wait_seconds for p in parts),
    )


def score_rows(
    tokenizer, pool, records, token_ids, *, clauses: bool, timeout_s: float = 30.0, ex_mode: str = "bird"
) -> HostScores:
    """Decode rows with offsets, execute them against their gold SQL under the run's EX rule ``ex_mode``, and
    (``clauses``) EXPO-SQL clause rewards with the same match rule."""
    eos = [tokenizer.eos_token_id]
    comps: list[DecodedCompletion] = [decode_with_offsets(tokenizer, t, eos) for t in token_ids]
    dbs, golds = [r["db_path"] for r in records], [r["gold_sql"] for r in records]
    preds = [c.text for c in comps]
    out = execution_outcomes(pool, dbs, preds, golds, timeout_s=timeout_s, mode=ex_mode)
    cl = (
        batch_clause_rewards(pool, dbs, preds, golds, out, timeout_s=timeout_s, options=clause_reward_options(ex_mode))
        if clauses
        else None
    )
    return HostScores(comps, out, cl)


def _concat(parts: Sequence[HostScores]) -> HostScores:
    o = [p.outcomes for p in parts]
    outcomes = Outcomes(
        rewards=np.concatenate([x.rewards for x in o]),
        executable=np.concatenate([x.executable for x in o]),
        gold_ok=np.concatenate([x.gold_ok for x in o]),
        results=tuple(r for x in o for r in x.results),
    )
    # parts of one run: all with clause rewards or none
    clauses = None if parts[0].clauses is None else [c for p in parts for c in cast(list, p.clauses)]
    return HostScores([c for p in parts for c in p.completions], outcomes, clauses)


class RolloutSampler:
    """Samples rollouts chunk by chunk and scores each finished chunk with ``host_fn(records, token_ids)`` on one
    background thread kept for the whole run (module docstring). ``generate`` returns when the device work is
    queued and done; ``PendingRollouts.collect`` waits for the host work."""

    def __init__(
        self,
        tokenizer,
        host_fn: Callable[[list, list], HostScores],
        *,
        samples: int,
        temperature: float,
        max_new_tokens: int,
        prompts_per_call: int,
        max_cache_len: int | None = None,
    ):
        self.tokenizer, self.host_fn = tokenizer, host_fn
        self.samples, self.temperature, self.max_new_tokens = samples, temperature, max_new_tokens
        self.prompts_per_call, self.max_cache_len = prompts_per_call, max_cache_len
        self.pad = pad_id(tokenizer)
        self.host = ThreadPoolExecutor(max_workers=1)
        self.rows_scored = 0  # rows whose host work this process computed

    def generate(self, model, records, prompt_ids, *, seed: int) -> PendingRollouts:
        rows_p, rows_l, rows_r, futures = [], [], [], []
        rows_t: list = []
        t_sample, n = 0.0, self.samples
        for c, start in enumerate(range(0, len(prompt_ids), self.prompts_per_call)):
            chunk = prompt_ids[start : start + self.prompts_per_call]
            t0 = time.perf_counter()
            res = generate(
                model,
                chunk,
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                num_samples=n,
                eos_token_id=self.tokenizer.eos_token_id,
                seed=seed * 7919 + c,
                pad_id=self.pad,
                max_cache_len=self.max_cache_len,
            )
            t_sample += time.perf_counter() - t0
            recs = [records[start + i // n] for i in range(len(res.tokens))]
            # on a pod each process scores only its own rows (row r on process r mod P); collect gathers them
            mine = [i for i in range(len(res.tokens)) if owns_row(len(rows_t) + i)]
            rows_p += [chunk[i // n] for i in range(len(res.tokens))]
            rows_t += res.tokens
            rows_l += res.logprobs
            rows_r += recs
            if mine:
                futures.append(self.host.submit(self.host_fn, [recs[i] for i in mine], [res.tokens[i] for i in mine]))
            self.rows_scored += len(mine)
        return PendingRollouts(rows_p, rows_t, rows_l, rows_r, futures, t_sample)

    def close(self) -> None:
        self.host.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclasses.dataclass(frozen=True)
class PendingRollouts:
    """Sampled rows whose host scores are still being computed."""

    prompt_ids: list
    token_ids: list
    logprobs: list
    records: list
    futures: list
    sample_seconds: float

    def collect(self) -> Rollouts:
        t0 = time.perf_counter()
        scores = _gather_host_scores(len(self.token_ids), [f.result() for f in self.futures])
        return Rollouts(
            prompt_ids=self.prompt_ids,
            token_ids=self.token_ids,
            logprobs=self.logprobs,
            records=self.records,
            completions=scores.completions,
            outcomes=scores.outcomes,
            clauses=scores.clauses,
            tokens=sum(len(t) for t in self.token_ids),
            sample_seconds=self.sample_seconds,
            wait_seconds=time.perf_counter() - t0,
        )


def _gather_host_scores(n_rows: int, parts: Sequence[HostScores]) -> HostScores:
    """The host scores of all ``n_rows`` rows from this process's ``parts`` (its own rows, ``owns_row``) and the
    other processes'. Execution results stay with the process that computed them (None for the others' rows):
    only the rewards, flags, decoded texts and clause rewards travel."""
    if process_count() == 1:
        return _concat(parts)
    mine = [row for part in parts for row in _rows(part)]
    every = gather_rows("rollout host scores", n_rows, mine)
    own = iter(res for part in parts for res in part.outcomes.results)
    outcomes = Outcomes(
        rewards=np.asarray([row[1] for row in every], np.float32),
        executable=np.asarray([row[2] for row in every], bool),
        gold_ok=np.asarray([row[3] for row in every], bool),
        results=tuple(next(own) if owns_row(r) else None for r in range(n_rows)),
    )
    clauses = [row[4] for row in every] if every[0][5] else None  # the same host_fn scored every row
    return HostScores([row[0] for row in every], outcomes, clauses)


def _rows(part: HostScores) -> list[tuple]:
    """(completion, reward, executable, gold_ok, clause rewards, with clause rewards) per row of ``part``."""
    o, has = part.outcomes, part.clauses is not None
    clauses = part.clauses if part.clauses is not None else [None] * len(part.completions)
    return [
        (c, float(r), bool(e), bool(g), cl, has)
        for c, r, e, g, cl in zip(part.completions, o.rewards, o.executable, o.gold_ok, clauses)
    ]


def sample_rollouts(
    model,
    tokenizer,
    records,
    prompt_ids,
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    host_fn: Callable[[list, list], HostScores],
    prompts_per_call: int,
    max_cache_len: int | None = None,
) -> Rollouts:
    """Sample ``samples`` completions of every prompt from ``model`` and score them with ``host_fn`` (one
    ``RolloutSampler`` call, collected)."""
    with RolloutSampler(
        tokenizer,
        host_fn,
        samples=samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        prompts_per_call=prompts_per_call,
        max_cache_len=max_cache_len,
    ) as sampler:
        return sampler.generate(model, records, prompt_ids, seed=seed).collect()


def pick_questions(n: int, k: int, seed: int, step: int, draw: int = 0) -> np.ndarray:
    """Indices of the ``k`` questions of RL step ``step``: a permutation seeded by (seed, step) alone, so a
    resumed run draws the same questions (without replacement while k <= n). ``draw`` > 0: the step's further
    draws of dynamic sampling (``rl.filter_groups``), seeded by (seed, step, draw)."""
    rng = np.random.default_rng([seed, step] if draw == 0 else [seed, step, draw])
    return rng.permutation(n)[:k] if k <= n else rng.integers(0, n, size=k)


def chunk_prompts(prompts_per_step: int) -> int:
    """Prompts per sampler call: the largest divisor of ``prompts_per_step`` at most half of it, so every call
    has one shape and a step has >= 2 chunks whose host work overlaps sampling (1 prompt: 1)."""
    return max(d for d in range(1, max(prompts_per_step // 2, 1) + 1) if prompts_per_step % d == 0)


def sampler_prompts(rl) -> int:
    """Prompts per sampler call of the RL stage: ``rl.prompts_per_sampler_call`` (a divisor of
    ``rl.prompts_per_step``, checked by ``RLConfig``), or when it is 0 the automatic ``chunk_prompts``."""
    return rl.prompts_per_sampler_call or chunk_prompts(rl.prompts_per_step)
