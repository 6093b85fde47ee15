"""The online RL loop: one iteration is five named phases, timed and logged per step.

  generate   sample ``rl.samples_per_prompt`` completions for each of ``rl.prompts_per_step`` questions (drawn
             by (seed, step)) from the current params; each finished chunk's host work starts meanwhile.
             ``rl.filter_groups``: more draws until the groups with reward spread fill the batch (DAPO,
             ``rl/dynamic_sampling.py``); each draw goes through generate, execute and reward
  execute    wait for that host work: decode, run every completion and its gold SQL in the SQL worker pool
             (EXPO-SQL clause rewards too when the algorithm wants them)
  reward     PRM step scores of the completions (algorithms whose reward uses the PRM: ``uses_prm``)
  advantage  the algorithm's ``update`` (advantages / token rewards) laid out as the train batch
  update     ``rl.epochs`` passes of ``rl.mini_batches`` optimizer steps of the algorithm's loss over the batch
             (default one step on the whole batch; ``mesh.micro_batches`` only splits a step for memory)

``rl_iteration(inputs, state, step)`` is that iteration; ``RLInputs`` holds everything it reads. Where the rollouts
come from is its source: ``PromptSource`` here (prompts -> sampler -> SQL pool -> PRM), SQLConductor's
``EpisodeSource`` (multi-step orchestration episodes) in its curriculum GRPO.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

import jax

from rewardsql_jax.distributed import all_gather_objects, is_primary
from rewardsql_jax.models.sharding import placement
from rewardsql_jax.rl import RolloutSampler, get_algorithm, score_rows
from rewardsql_jax.rl import batches as rl_batches
from rewardsql_jax.rl.algorithm import OnlineAlgorithm
from rewardsql_jax.rl.dynamic_sampling import choose_groups, group_rows, informative_groups
from rewardsql_jax.rl.rollouts import concat_rollouts, pick_questions, sampler_prompts
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.training.fit import fit

from ..context import RunContext
from ..policy import save_model
from ..run_config import OnlineRLConfig
from .report import online_metrics, plot_learning_curve
from .setup import (
    PRMOverPolicyBase,
    RLData,
    fit_options,
    new_state,
    prm_scorer_for,
    prm_scorer_if_needed,
    prm_scores,
    rl_data,
    train_step,
)

if TYPE_CHECKING:
    from rewardsql_jax.rewards.prm_scoring import PRMScorer

    from ..run_config import RLConfig

PHASES = ("generate", "execute", "reward", "advantage", "update")


@dataclasses.dataclass(frozen=True)
class PromptSource:
    """The Reward-SQL pipeline's rollout source: ``rl.samples_per_prompt`` completions of each of
    ``rl.prompts_per_step`` questions drawn by (seed, step, draw), executed and scored on the host, PRM step scores
    when the reward uses them (``scorer``; None otherwise), laid out as ``RLBatch`` / ``GroupedRLBatch`` rows."""

    rl: RLConfig
    seed: int
    data: RLData
    sampler: RolloutSampler
    scorer: PRMScorer | PRMOverPolicyBase | None
    pad_id: int
    field: str  # the batch field the algorithm's update fills (OnlineAlgorithm.batch_field)

    @property
    def completion_length(self) -> int | None:
        """Shared-prefix batches (each prompt once per group) are completion-aligned to ``max_new_tokens``."""
        return self.rl.max_new_tokens if self.rl.shared_prefix else None

    def sample(self, state, step: int, draw: int, timer: PhaseTimer):
        """The generate, execute and reward phases of one draw of questions: ``(rollouts, PRM scores or None)``."""
        data, rl = self.data, self.rl
        idx = pick_questions(len(data.records), rl.prompts_per_step, self.seed, step, draw)
        with timer.phase("generate"):
            seed = self.seed * 100_003 + step + 1_000_003 * draw
            pending = self.sampler.generate(
                state.model(), [data.records[i] for i in idx], [data.prompt_ids[i] for i in idx], seed=seed
            )
        with timer.phase("execute"):
            ro = pending.collect()
        with timer.phase("reward"):
            scores = (
                prm_scores(
                    prm_scorer_for(self.scorer, state),
                    [r["prompt"] for r in ro.records],
                    [c.text for c in ro.completions],
                )
                if self.scorer is not None
                else None
            )
        return ro, scores

    def concat(self, parts):
        """The rollouts of several draws as one batch (``rl.filter_groups``)."""
        return concat_rollouts(parts)

    def train_batch(self, ro, upd):
        return rl_batches.train_batch(
            ro,
            upd,
            field=self.field,
            group_size=self.rl.samples_per_prompt,
            length=self.data.length,
            pad_id=self.pad_id,
            completion_length=self.completion_length,
        )

    def record(self, step: int, ro, upd, metrics: dict, phases: dict, seconds: float) -> dict:
        rec = step_record(step, ro, upd, metrics, phases, seconds)
        # groups with a right and a wrong answer: what the outcome reward can teach
        rec["outcome_informative_groups"] = int(
            informative_groups(ro.outcomes.rewards, self.rl.samples_per_prompt).sum()
        )
        return rec


class RolloutSource(Protocol):
    """Where an online iteration's rollouts come from (``RLInputs``' docstring)."""

    def sample(self, state, step: int, draw: int, timer: PhaseTimer) -> tuple: ...

    def train_batch(self, rollouts, update): ...

    def record(self, step: int, rollouts, update, metrics, phases: dict, seconds: float) -> dict: ...

    def concat(self, parts): ...


@dataclasses.dataclass(frozen=True)
class RLInputs:
    """What an online iteration reads: the config (``rl``: samples_per_prompt, prompts_per_step, epochs,
    mini_batches, filter_groups), the algorithm, the rollout source and the jitted train step.

    A source (``PromptSource``; SQLConductor's ``EpisodeSource``) has ``sample(state, step, draw, timer) ->
    (rollouts, scores)`` (the generate / execute / reward phases), ``train_batch(rollouts, update)`` (None: nothing
    to learn, no optimizer step), ``record(step, rollouts, update, metrics or None, phase seconds, seconds)`` (the
    logged record) and, for ``rl.filter_groups``, ``concat(parts)`` of rollouts with ``take(rows)``."""

    rl: OnlineRLConfig  # RLConfig, or SQLConductor's ConductorRLConfig
    algorithm: OnlineAlgorithm
    source: RolloutSource
    step_fn: Callable


class PhaseTimer:
    """Wall seconds of each named phase of one iteration."""

    def __init__(self):
        self.seconds = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def rl_iteration(inputs: RLInputs, state, step: int):
    """One online RL step (module docstring); returns ``(state, record)``, the record being what the log holds."""
    rl, algo, source = inputs.rl, inputs.algorithm, inputs.source
    timer, t0 = PhaseTimer(), time.perf_counter()
    filtering = rl.filter_groups
    draws = rl.filter_groups_max_draws if filtering else 1
    parts, scores, flags = [], [], []
    for draw in range(draws):  # one draw unless dynamic sampling asks for groups with spread
        ro, sc = source.sample(state, step, draw, timer)
        parts.append(ro)
        scores.append(sc)
        if not filtering:
            break
        with timer.phase("advantage"):
            flags.append(informative_groups(algo.update(ro, sc, rl).rewards, rl.samples_per_prompt))
        if sum(int(f.sum()) for f in flags) >= rl.prompts_per_step:
            break
    ro, sc, extra = parts[0], scores[0], {}
    if filtering:
        chosen = choose_groups(flags, rl.prompts_per_step)
        rows = group_rows(chosen, rl.samples_per_prompt, [len(p.token_ids) for p in parts])
        ro = source.concat(parts).take(rows)
        if sc is not None:
            every_score = [x for part in scores for x in part]
            sc = [every_score[r] for r in rows]
        extra = {
            "draws": len(parts),
            "informative_groups_first_draw": int(flags[0].sum()),
            "informative_groups": int(sum(flags[d][g] for d, g in chosen)),
        }
    with timer.phase("advantage"):
        upd = algo.update(ro, sc, rl)
        if not filtering:  # groups whose rewards differ: the only ones a group-normalised update learns from
            extra = {"informative_groups": int(informative_groups(upd.rewards, rl.samples_per_prompt).sum())}
        batch = source.train_batch(ro, upd)
    metrics = None
    if batch is not None:
        with timer.phase("update"):  # rl.epochs passes of rl.mini_batches optimizer steps over the rollouts
            ms = []
            for _epoch in range(rl.epochs):
                for part in rl_batches.mini_batches(batch, rl.mini_batches):
                    state, m = inputs.step_fn(state, part)
                    ms.append(m)
            metrics = rl_batches.mean_metrics(jax.device_get(ms))
    return state, {**source.record(step, ro, upd, metrics, timer.seconds, time.perf_counter() - t0), **extra}


def step_record(step: int, ro, upd, m: dict, phases: dict, seconds: float) -> dict:
    """The logged record of one step: rewards, the loss's metrics, phase timings and throughput."""
    device = phases["generate"] + phases["reward"] + phases["update"]
    rec = {
        "step": step,
        "reward": float(upd.rewards.mean()),
        "or_rate": float(ro.outcomes.rewards.mean()),
        "executable_rate": float(ro.outcomes.executable.mean()),
        "loss": float(m["loss"]),
        "kl": float(m.get("kl", float("nan"))),
        "clip_ratio": float(m.get("clip_ratio/region", float("nan"))),
        "grad_norm": float(m["grad_norm"]),
        "loss_is_finite": bool(m["loss_is_finite"]),
        "tokens": ro.tokens,
        "sample_seconds": ro.sample_seconds,
        "host_wait_seconds": ro.wait_seconds,
        "prm_seconds": phases["reward"],
        "train_seconds": phases["update"],
        "step_seconds": seconds,
        "phase_seconds": {p: phases[p] for p in PHASES},
        # every scalar the loss reported (a custom loss's own metrics land here)
        "loss_metrics": {k: float(v) for k, v in m.items() if getattr(v, "ndim", 0) == 0},
    }
    # the device works while sampling, PRM scoring and training; the rest of the step is host-only time
    rec["device_idle_fraction"] = max(0.0, 1.0 - device / seconds)
    return rec


def run_online(ctx: RunContext) -> dict:
    cfg, rl, out = ctx.config, ctx.config.rl, ctx.stage_dir("rl")
    # rl.run_online: the algorithm is an online one
    tok, pool, algo = ctx.tokenizer(), ctx.pool(), cast(OnlineAlgorithm, get_algorithm(rl.algorithm))
    state = new_state(ctx)
    step_fn = train_step(ctx, state)

    def host_fn(records, token_ids):
        return score_rows(tok, pool, records, token_ids, clauses=algo.clause_rewards, ex_mode=cfg.data.ex_mode)

    sampler = RolloutSampler(
        tok,
        host_fn,
        samples=rl.samples_per_prompt,
        temperature=rl.temperature,
        max_new_tokens=rl.max_new_tokens,
        prompts_per_call=sampler_prompts(rl),
    )
    data = rl_data(ctx)
    source = PromptSource(
        rl=rl,
        seed=cfg.seed,
        data=data,
        sampler=sampler,
        scorer=prm_scorer_if_needed(ctx, state),
        pad_id=pad_id(tok),
        field=algo.batch_field,
    )
    inputs = RLInputs(rl=rl, algorithm=algo, source=source, step_fn=step_fn)
    try:
        run = fit(
            state,
            lambda state, step: rl_iteration(inputs, state, step),
            **fit_options(ctx),
            postfix=("reward", "or_rate", "loss"),
        )
    finally:
        sampler.close()
    state, history = run.state, run.history
    jax.block_until_ready(state.params)
    save_model(ctx, state.model(), out / "policy")
    if is_primary():
        plot_learning_curve(history, out / "learning_curve.png", title=f"rl ({rl.algorithm})")
    metrics = online_metrics(rl, history, resumed_from=run.resumed_from, dropped=data.dropped_too_long)
    # the host work (decode, execute, score) each process did: its own rows only
    metrics["rows_scored_per_process"] = all_gather_objects("rl rows scored", sampler.rows_scored)
    if source.scorer is not None:
        metrics["prm_placement"] = placement(prm_scorer_for(source.scorer, state).model)
        metrics["prm_shares_policy_base"] = isinstance(source.scorer, PRMOverPolicyBase)
    return ctx.finish("rl", metrics)
