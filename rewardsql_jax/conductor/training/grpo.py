"""Curriculum GRPO of the orchestration policy (SQLConductor Sec. 4.4, Curriculum RL).

* Curriculum: RL runs on the hard training questions (those whose best explored workflow is unstable,
  stability < ``hard_threshold``), visited from easier to harder difficulty labels.
* G rollouts per question with the policy sampling at temperature T; each rollout's reward is
  lambda * R_exec + (1 - lambda) * (ExecF1 + bonus * exact) (``rewards.py``).
* A_i = (r_i - mean) / (std + delta) within the group (``rewards.group_advantages``): the update of the
  registered algorithm ``conductor_curriculum_grpo`` (``curriculum_grpo.py``); the loss is ``rl.policy_loss``'s
  (GRPO unless ``rl.loss`` names another policy-gradient loss reading advantages).
* The clipped GRPO loss with k3 KL to the SFT policy acts only on policy-generated tokens (Omega_i:
  ``<reasoning>`` and ``<call>``); ``<results>`` and the prompt have completion_mask 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rewardsql_jax import losses
from rewardsql_jax.models.sharding import shard_model
from rewardsql_jax.rl import get_algorithm, policy_loss
from rewardsql_jax.rl.algorithm import OnlineAlgorithm
from rewardsql_jax.stages.rl.online import RLInputs, rl_iteration
from rewardsql_jax.stages.run_config import OnlineRLConfig
from rewardsql_jax.training.batch import RLBatch
from rewardsql_jax.training.collate import masked_rl_batch
from rewardsql_jax.training.fit import fit
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step
from rewardsql_jax.training.step_checkpoints import StepCheckpoints

from .curriculum_grpo import NAME as ALGORITHM
from .rollout import run_policy_episodes
from .trajectory import flatten

if TYPE_CHECKING:
    from ..actions.env import Env
    from ..rewards import RewardConfig

DIFFICULTY_ORDER = {"simple": 0, "moderate": 1, "challenging": 2}


def curriculum(examples, stability: dict, hard_threshold: float) -> list:
    """Hard questions (best stability < threshold), ordered simple -> challenging, then by stability desc."""
    hard = [ex for ex in examples if stability.get(ex.question_id, 0.0) < hard_threshold]
    return sorted(
        hard,
        key=lambda ex: (DIFFICULTY_ORDER.get(ex.difficulty, 3), -stability.get(ex.question_id, 0.0), ex.question_id),
    )


def episode_batch(rollouts, advantages, pad_id: int) -> RLBatch:
    """Token rows of the episodes: completion_mask = policy-generated tokens, old log-probs from the sampler.
    ``advantages``: one per episode [N], or one array per episode with one entry per policy decision (spread over
    that decision's tokens)."""
    if len(advantages) and np.ndim(advantages[0]) == 1:
        advantages = [decision_tokens(r.segments, a) for r, a in zip(rollouts, advantages)]
    return masked_rl_batch([flatten(r.segments) for r in rollouts], advantages, pad_id)


def decision_tokens(segments, decision_values) -> list:
    """Per-token values of one episode's row: decision t's value on the tokens of its policy segment, 0 elsewhere."""
    policy = [s for s in segments if s.policy]
    if len(policy) != len(decision_values):
        raise ValueError(f"{len(decision_values)} decision values for an episode of {len(policy)} policy decisions")
    values = iter(decision_values)
    return [v for s in segments for v in [float(next(values)) if s.policy else 0.0] * len(s.ids)]


@dataclasses.dataclass(frozen=True)
class Episodes:
    """One step's G episodes per question (prompt-major): their records (iterated, as the algorithm's ``update``
    reads them) and token rollouts."""

    records: list
    rollouts: list

    def __iter__(self):
        return iter(self.records)


@dataclasses.dataclass(frozen=True)
class EpisodeSource:
    """The rollout source of ``stages.rl.online.rl_iteration`` for the orchestration policy: step i runs the next
    ``rl.prompts_per_step`` curriculum questions (in order, wrapping) as ``rl.samples_per_prompt`` policy episodes
    each, sampled with seed ``seed + i``; actions run and SQL executes inside the episodes (phase ``generate``)."""

    questions: list
    env: Env
    tokenizer: Any
    make_policy_server: Callable[..., Any]
    action_server: Any
    rl: OnlineRLConfig  # the ConductorRLConfig
    reward_cfg: RewardConfig
    max_steps: int
    pad_id: int
    seed: int
    step_values: bool = False  # rl.credit == "step": each decision's reward of stopping there is recorded

    def sample(self, state, step: int, draw: int, timer):
        rl, questions = self.rl, self.questions
        start = (step * rl.prompts_per_step) % len(questions)
        chosen = (questions + questions)[start : start + min(rl.prompts_per_step, len(questions))]
        with timer.phase("generate"):
            server = self.make_policy_server(state.model(), rl.temperature, self.seed + step + draw)
            records, rollouts = run_policy_episodes(
                chosen,
                self.env,
                self.tokenizer,
                server,
                self.action_server,
                max_steps=self.max_steps,
                reward_cfg=self.reward_cfg,
                repeats=rl.samples_per_prompt,
                episode_key=("grpo", step, draw),
                step_values=self.step_values,
            )
        return Episodes(records, rollouts), None

    def train_batch(self, episodes: Episodes, update):
        """None when every advantage is 0 (every group's rewards equal): no optimizer step."""
        advantages = update.advantages if update.token_values is None else update.token_values
        if not max(float(np.abs(a).max(initial=0.0)) for a in advantages) > 0:
            return None
        return episode_batch(episodes.rollouts, advantages, self.pad_id)

    def concat(self, parts):
        raise ValueError("SQLConductor's RL has no dynamic sampling (rl.filter_groups): one draw per step.")

    def record(self, step: int, episodes: Episodes, update, metrics, phases: dict, seconds: float) -> dict:
        records = episodes.records
        rec = {
            "step": step,
            "reward": float(update.rewards.mean()),
            "ex": float(np.mean([r.exact for r in records])),
            "calls": float(np.mean([r.num_calls for r in records])),
            # share of the sampled decisions whose <call> did not parse (they count as calls, run no action)
            "malformed": sum(r.num_calls - len(r.workflow) for r in records)
            / max(sum(r.num_calls for r in records), 1),
        }
        if metrics is not None:
            rec.update(loss=float(metrics["loss"]), kl=float(metrics.get("kl", 0.0)))
        return rec


def train_grpo(
    policy,
    questions,
    env,
    tokenizer,
    make_policy_server,
    action_server,
    cfg,
    reward_cfg,
    *,
    max_steps: int,
    pad_id: int,
    seed: int = 0,
    log=None,
    on_log=None,
    checkpoint_dir=None,
    stop_after: int = 0,
    mesh=None,
    micro_batches: int = 1,
):
    """Run ``cfg.steps`` GRPO steps over the curriculum; returns (policy, per-step metrics).

    Each step is the pipeline's online iteration (``stages.rl.online.rl_iteration``) with the episodes as its
    rollout source (``EpisodeSource``); the loss, its options and the advantages come from the registered
    ``conductor_curriculum_grpo`` algorithm (``curriculum_grpo.py``). One ``training.fit`` run: step i samples its
    questions and seed from ``(seed, i)`` alone, so with ``checkpoint_dir`` (a checkpoint every
    ``cfg.checkpoint_every`` steps) a killed or ``stop_after``-stopped run resumes and ends as an uninterrupted
    one. ``mesh`` shards the policy and the batch; ``micro_batches`` splits each batch (whole groups,
    ``mesh.micro_batches`` divides G) for exact gradient accumulation. After every step ``log`` gets a one-line
    summary and ``on_log(step, metrics)`` the metrics.
    """
    if not questions:
        return policy, []
    algorithm = cast(OnlineAlgorithm, get_algorithm(ALGORITHM))
    loss, options = policy_loss(cfg, algorithm)
    opt = OptimizerConfig(learning_rate=cfg.lr, max_grad_norm=1.0)
    if mesh is not None:
        policy = shard_model(policy, mesh)
    reference = "ref_logprobs" in losses.spec(loss).inputs(options)  # the loss's KL term reads the SFT policy
    state = create_train_state(policy, make_optimizer(opt), seed=seed, with_reference=reference)
    step_fn = make_train_step(state.graphdef, loss, options, mesh=mesh, micro_batches=micro_batches)
    source = EpisodeSource(
        list(questions),
        env,
        tokenizer,
        make_policy_server,
        action_server,
        cfg,
        reward_cfg,
        max_steps,
        pad_id,
        seed,
        step_values=cfg.credit == "step",
    )
    inputs = RLInputs(rl=cfg, algorithm=algorithm, source=source, step_fn=step_fn)

    def report(record):
        if "step" not in record:  # the resume notice
            return
        if on_log:
            on_log(record["step"], record)
        if log:
            log(
                f"  grpo step {record['step']}: "
                + ", ".join(
                    f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items() if k != "step"
                )
            )

    checkpoints = None if checkpoint_dir is None else StepCheckpoints(checkpoint_dir, name="grpo")
    result = fit(
        state,
        lambda state, i: rl_iteration(inputs, state, i),
        steps=cfg.steps,
        desc="grpo",
        log=report,
        checkpoints=checkpoints,
        checkpoint_every=cfg.checkpoint_every,
        stop_after=stop_after,
        postfix=("reward", "ex"),
        say=log or print,
    )
    return result.state.model(), result.history
