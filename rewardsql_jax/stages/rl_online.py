"""Online RL steps (Reward-SQL Sec. 5.3 GRPO and its variants; EXPO-SQL Sec. 3.3 REINFORCE++).

One step: pick ``prompts_per_step`` training questions (seeded by (seed, step)), sample ``samples_per_prompt``
completions each from the current params, score them, assemble advantages / token rewards, and take one
optimizer step on the whole rollout batch (``micro_batches`` only splits it for memory). Per algorithm:

  grpo               R_i = PR + OR; step advantages of Sec. 5.3 (``rl.advantage_variant`` "paper" | "released")
                     on the tokens of each step; loss ``grpo`` with clip, k3 KL to the SFT policy.
  grpo_outcome       OR only; per-sequence group z-scores (DeepSeekMath outcome supervision); loss ``grpo``.
  grpo_deepseekmath  PRM step scores, DeepSeekMath process supervision (Reward-SQL appendix A.3.1); loss ``grpo``.
  reinforce_pp       EXPO-SQL clause rewards on each clause's tokens; loss ``reinforce_pp`` (KL in the reward,
                     gamma 0 so each token is weighted by its own clause reward as in Eq. 4, global whitening).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from rewardsql_jax.rewards.rollout_rewards import (clause_token_rewards, outcome_advantages, process_reward,
                                                   process_token_advantages)

from rewardsql_jax.training.collate import grouped_rl_batch, rl_batch
from .rl_rollouts import Rollouts

PRM_ALGORITHMS = ("grpo", "grpo_deepseekmath", "dpo", "rs")
ONLINE_ALGORITHMS = ("grpo", "grpo_outcome", "grpo_deepseekmath", "reinforce_pp")


@dataclasses.dataclass(frozen=True)
class StepRewards:
    """The batch to train on plus the per-completion scalar reward (for logging) and PRM step scores."""

    batch: object
    rewards: np.ndarray
    step_scores: list | None
    score_seconds: float = 0.0  # PRM scoring (device) time


def loss_setup(rl) -> tuple[str, dict]:
    """(loss name, loss options) of an online algorithm; the sampler's temperature scales the log-probs."""
    if rl.algorithm == "reinforce_pp":
        return "reinforce_pp", {"clip_eps": rl.clip_eps, "kl_coef": rl.kl_beta, "kl": "k1", "gamma": 0.0,
                                "temperature": rl.temperature}
    opts = {"clip_eps": rl.clip_eps, "beta": rl.kl_beta, "kl": "k3", "temperature": rl.temperature}
    if rl.entropy_coef != 0.0:  # paper: entropy bonus 0.001
        opts["entropy_coef"] = rl.entropy_coef
    return "grpo", opts


def check_online_config(rl) -> None:
    """Clear errors for settings the online loop cannot honour."""
    if rl.temperature <= 0:
        raise ValueError(f"rl.temperature={rl.temperature}: RL samples rollouts, use a temperature > 0 (paper: 1.0)")
    if rl.algorithm.startswith("grpo") and rl.samples_per_prompt < 2:
        raise ValueError(f"rl.algorithm={rl.algorithm!r} normalises rewards within a group of samples of one prompt; "
                         f"set rl.samples_per_prompt >= 2 (paper: 8)")
    if rl.entropy_coef != 0.0 and rl.algorithm == "reinforce_pp":
        raise ValueError(f"rl.entropy_coef={rl.entropy_coef}: the REINFORCE++ loss has no entropy bonus; "
                         f"set rl.entropy_coef=0.0 or use a grpo algorithm")


def train_batch(ro: Rollouts, *, group_size: int, length: int, pad_id: int, completion_length: int | None, **values):
    """The rollouts as a train batch: ``GroupedRLBatch`` (each prompt once, prompts left-padded to ``length -
    completion_length``) when ``completion_length`` is given, else ``RLBatch`` rows of ``length``."""
    if completion_length is None:
        return rl_batch(ro.prompt_ids, ro.token_ids, ro.logprobs, length=length, pad_id=pad_id, **values)
    return grouped_rl_batch(ro.prompt_ids[::group_size], ro.token_ids, ro.logprobs, group=group_size,
                            prompt_length=length - completion_length, completion_length=completion_length,
                            pad_id=pad_id, **values)


def step_rewards(algorithm: str, variant: str, ro: Rollouts, *, group_size: int, scorer, length: int,
                 pad_id: int, completion_length: int | None = None, rm_coef: float = 1.0) -> StepRewards:
    """Rewards, advantages and the train batch of one rollout batch (module docstring); ``completion_length``
    set: a shared-prefix ``GroupedRLBatch`` (``train_batch``). ``rm_coef``: PRM weight of the "released"
    variant (``rl.rm_coef``; its logged reward is rm_coef * PR + OR)."""
    outcomes = ro.outcomes.rewards
    scores, t0 = None, time.perf_counter()
    if algorithm in ("grpo", "grpo_deepseekmath"):
        scores = scorer.score([r["prompt"] for r in ro.records], [c.text for c in ro.completions])
    score_seconds = time.perf_counter() - t0
    kw = dict(group_size=group_size, length=length, pad_id=pad_id, completion_length=completion_length)
    if algorithm == "grpo_outcome":
        batch = train_batch(ro, advantages=outcome_advantages(outcomes, group_size), **kw)
        return StepRewards(batch, outcomes, None)
    if algorithm == "reinforce_pp":
        values = [clause_token_rewards(c, cl, gold_ok=ok)
                  for c, cl, ok in zip(ro.completions, ro.clauses, ro.outcomes.gold_ok)]
        batch = train_batch(ro, token_values=values, field="token_rewards", **kw)
        per_seq = np.asarray([v.mean() if len(v) else 0.0 for v in values], np.float32)
        return StepRewards(batch, per_seq, None)
    v = variant if algorithm == "grpo" else "deepseekmath"
    values = process_token_advantages(ro.completions, scores, outcomes, group_size, variant=v, rm_coef=rm_coef)
    batch = train_batch(ro, token_values=values, **kw)
    pr = np.asarray([process_reward(s) for s in scores], np.float32)
    if v == "released":
        pr = np.float32(rm_coef) * pr
    return StepRewards(batch, pr + outcomes if algorithm == "grpo" else pr, scores, score_seconds)


def pick_questions(n: int, k: int, seed: int, step: int) -> np.ndarray:
    """Indices of the ``k`` questions of RL step ``step``: a permutation seeded by (seed, step) alone, so a
    resumed run draws the same questions (without replacement while k <= n)."""
    rng = np.random.default_rng([seed, step])
    return rng.permutation(n)[:k] if k <= n else rng.integers(0, n, size=k)


def chunk_prompts(prompts_per_step: int) -> int:
    """Prompts per sampler call: the largest divisor of ``prompts_per_step`` at most half of it, so every call
    has one shape and a step has >= 2 chunks whose host work overlaps sampling (1 prompt: 1)."""
    return max(d for d in range(1, max(prompts_per_step // 2, 1) + 1) if prompts_per_step % d == 0)


def sampler_prompts(rl) -> int:
    """Prompts per sampler call of the RL stage: ``rl.prompts_per_sampler_call`` (a divisor of
    ``rl.prompts_per_step``, checked by ``RLConfig``), or when it is 0 the automatic ``chunk_prompts``."""
    return rl.prompts_per_sampler_call or chunk_prompts(rl.prompts_per_step)
