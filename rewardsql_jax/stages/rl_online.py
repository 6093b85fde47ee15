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

``rl_iteration(inputs, state, step)`` is that iteration; ``RLInputs`` holds everything it reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import jax

from rewardsql_jax.distributed import all_gather_objects, is_primary
from rewardsql_jax.models.sharding import placement
from rewardsql_jax.rl import RolloutSampler, get_algorithm, score_rows
from rewardsql_jax.rl import update as rl_update
from rewardsql_jax.rl.algorithm import OnlineAlgorithm
from rewardsql_jax.rl.dynamic_sampling import choose_groups, group_rows, informative_groups
from rewardsql_jax.rl.rollouts import concat_rollouts, pick_questions, sampler_prompts
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.training.fit import fit

from .context import RunContext
from .policy import save_model
from .rl_report import online_metrics, plot_learning_curve
from .rl_setup import RLData, fit_options, new_state, prm_scorer_if_needed, prm_scores, rl_data, train_step

if TYPE_CHECKING:
    from rewardsql_jax.rewards.prm_scoring import PRMScorer

    from .run_config import RLConfig

PHASES = ("generate", "execute", "reward", "advantage", "update")


@dataclasses.dataclass(frozen=True)
class RLInputs:
    """What an online iteration reads: the config, the algorithm, its questions, the sampler, the PRM scorer
    (None when the reward does not use it: ``uses_prm``), the jitted train step and the batch layout."""

    rl: RLConfig
    seed: int
    algorithm: OnlineAlgorithm
    data: RLData
    sampler: RolloutSampler
    scorer: PRMScorer | None
    step_fn: Callable
    pad_id: int

    @property
    def completion_length(self) -> int | None:
        """Shared-prefix batches (each prompt once per group) are completion-aligned to ``max_new_tokens``."""
        return self.rl.max_new_tokens if self.rl.shared_prefix else None


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
    rl, algo = inputs.rl, inputs.algorithm
    timer, t0 = PhaseTimer(), time.perf_counter()
    draws = rl.filter_groups_max_draws if rl.filter_groups else 1
    parts, scores, flags = [], [], []
    for draw in range(draws):  # one draw unless dynamic sampling asks for groups with spread
        ro, sc = _sample_and_score(inputs, state, step, draw, timer)
        parts.append(ro)
        scores.append(sc)
        if not rl.filter_groups:
            break
        with timer.phase("advantage"):
            flags.append(informative_groups(algo.update(ro, sc, rl).rewards, rl.samples_per_prompt))
        if sum(int(f.sum()) for f in flags) >= rl.prompts_per_step:
            break
    ro, sc, extra = parts[0], scores[0], {}
    if rl.filter_groups:
        chosen = choose_groups(flags, rl.prompts_per_step)
        rows = group_rows(chosen, rl.samples_per_prompt, [len(p.token_ids) for p in parts])
        ro = concat_rollouts(parts).take(rows)
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
        if not rl.filter_groups:  # groups whose rewards differ: the only ones a group-normalised update learns from
            extra = {"informative_groups": int(informative_groups(upd.rewards, rl.samples_per_prompt).sum())}
        # groups with a right and a wrong answer: what the outcome reward can teach
        extra["outcome_informative_groups"] = int(informative_groups(ro.outcomes.rewards, rl.samples_per_prompt).sum())
        batch = rl_update.train_batch(
            ro,
            upd,
            group_size=rl.samples_per_prompt,
            length=inputs.data.length,
            pad_id=inputs.pad_id,
            completion_length=inputs.completion_length,
        )
    with timer.phase("update"):  # rl.epochs passes of rl.mini_batches optimizer steps over the rollouts
        ms = []
        for _epoch in range(rl.epochs):
            for part in rl_update.mini_batches(batch, rl.mini_batches):
                state, m = inputs.step_fn(state, part)
                ms.append(m)
        metrics = rl_update.mean_metrics(jax.device_get(ms))
    return state, {**step_record(step, ro, upd, metrics, timer.seconds, time.perf_counter() - t0), **extra}


def _sample_and_score(inputs: RLInputs, state, step: int, draw: int, timer: PhaseTimer):
    """The generate, execute and reward phases of one draw of questions."""
    data, rl = inputs.data, inputs.rl
    idx = pick_questions(len(data.records), rl.prompts_per_step, inputs.seed, step, draw)
    with timer.phase("generate"):
        seed = inputs.seed * 100_003 + step + 1_000_003 * draw
        pending = inputs.sampler.generate(
            state.model(), [data.records[i] for i in idx], [data.prompt_ids[i] for i in idx], seed=seed
        )
    with timer.phase("execute"):
        ro = pending.collect()
    with timer.phase("reward"):
        scores = (
            prm_scores(inputs.scorer, [r["prompt"] for r in ro.records], [c.text for c in ro.completions])
            if inputs.scorer is not None
            else None
        )
    return ro, scores


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
    inputs = RLInputs(
        rl=rl,
        seed=cfg.seed,
        algorithm=algo,
        data=data,
        sampler=sampler,
        scorer=prm_scorer_if_needed(ctx),
        step_fn=step_fn,
        pad_id=pad_id(tok),
    )
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
    if inputs.scorer is not None:
        metrics["prm_placement"] = placement(inputs.scorer.model)
    return ctx.finish("rl", metrics)
