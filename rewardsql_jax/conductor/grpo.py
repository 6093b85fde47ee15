"""Curriculum GRPO of the orchestration policy (SQLConductor Sec. 4.4, Curriculum RL).

* Curriculum: RL runs on the hard training questions (those whose best explored workflow is unstable,
  stability < ``hard_threshold``), visited from easier to harder difficulty labels.
* G rollouts per question with the policy sampling at temperature T; each rollout's reward is
  lambda * R_exec + (1 - lambda) * (ExecF1 + bonus * exact) (``rewards.py``).
* A_i = (r_i - mean) / (std + delta) within the group (``rewards.group_advantages``).
* The clipped GRPO loss with k3 KL to the SFT policy acts only on policy-generated tokens (Omega_i:
  ``<reasoning>`` and ``<call>``); ``<results>`` and the prompt have completion_mask 0.
"""
from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.rewards import group_advantages
from rewardsql_jax.training.collate import bucket_length, pad_rows
from rewardsql_jax.training.batch import RLBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .evaluate import run_policy_episodes
from .trajectory import flatten

DIFFICULTY_ORDER = {"simple": 0, "moderate": 1, "challenging": 2}


def curriculum(examples, stability: dict, hard_threshold: float) -> list:
    """Hard questions (best stability < threshold), ordered simple -> challenging, then by stability desc."""
    hard = [ex for ex in examples if stability.get(ex.question_id, 0.0) < hard_threshold]
    return sorted(hard, key=lambda ex: (DIFFICULTY_ORDER.get(ex.difficulty, 3), -stability.get(ex.question_id, 0.0),
                                        ex.question_id))


def rl_batch(rollouts, advantages, pad_id: int) -> RLBatch:
    """Token rows of the rollouts: completion_mask = policy-generated tokens, old log-probs from the sampler."""
    rows = [flatten(r.segments) for r in rollouts]
    length = bucket_length(max(len(ids) for ids, _, _ in rows))
    return RLBatch(input_ids=pad_rows([ids for ids, _, _ in rows], length, pad_id),
                   attention_mask=pad_rows([[1] * len(ids) for ids, _, _ in rows], length, 0),
                   completion_mask=pad_rows([m for _, m, _ in rows], length, 0),
                   old_logprobs=pad_rows([lp for _, _, lp in rows], length, 0.0, dtype=np.float32),
                   advantages=np.asarray(advantages, np.float32))


def train_grpo(policy, questions, env, tokenizer, make_policy_server, action_server, cfg, reward_cfg, *,
               max_steps: int, pad_id: int, seed: int = 0, log=None, on_log=None):
    """Run ``cfg.steps`` GRPO steps over the curriculum; returns (policy, per-step metrics).

    After every step ``log`` gets a one-line summary and ``on_log(step, metrics)`` the metrics.
    """
    if not questions:
        return policy, []
    opt = OptimizerConfig(learning_rate=cfg.lr, max_grad_norm=1.0)
    state = create_train_state(policy, make_optimizer(opt), seed=seed, with_reference=cfg.kl_beta > 0)
    step_fn = make_train_step(state.graphdef, "grpo", {"clip_eps": cfg.clip_eps, "beta": cfg.kl_beta,
                                                       "temperature": cfg.temperature})
    history = []
    bar = tqdm(range(cfg.steps), desc="grpo")
    for step in bar:
        start = (step * cfg.prompts_per_step) % len(questions)
        chosen = (questions + questions)[start:start + min(cfg.prompts_per_step, len(questions))]
        server = make_policy_server(state.model(), cfg.temperature, seed + step)
        records, rollouts = run_policy_episodes(chosen, env, tokenizer, server, action_server,
                                                max_steps=max_steps, reward_cfg=reward_cfg, repeats=cfg.group_size)
        rewards = np.asarray([r.reward for r in records], np.float32)
        adv = np.asarray(group_advantages(rewards, cfg.group_size))
        metrics = {"step": step, "reward": float(rewards.mean()), "ex": float(np.mean([r.exact for r in records])),
                   "calls": float(np.mean([r.num_calls for r in records]))}
        if np.abs(adv).max() > 0:
            state, m = step_fn(state, rl_batch(rollouts, adv, pad_id))
            metrics.update(loss=float(m["loss"]), kl=float(m.get("kl", 0.0)))
        history.append(metrics)
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", ex=f"{metrics['ex']:.2f}")
        if on_log:
            on_log(step, metrics)
        if log:
            log(f"  grpo step {step}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in metrics.items()))
    return state.model(), history
