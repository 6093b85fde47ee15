"""Stage 5 — RL from the SFT policy (Reward-SQL Sec. 5.2-5.3; EXPO-SQL Sec. 3.3), resumable.

``rl.algorithm``: online grpo (PRM + outcome, Sec. 5.3), grpo_outcome, grpo_deepseekmath, reinforce_pp
(EXPO-SQL clause rewards) — see ``rl_online.py`` — or offline dpo / rs from PRM-scored candidates
(``rl_offline.py``). The reference policy of the KL / DPO terms is the SFT policy. The PRM is read from
``prm/model`` (written by the prm stage).

Resume: the train state is checkpointed with Orbax (``rl_checkpoint.py``) to ``rl/checkpoint`` every
``rl.checkpoint_every`` steps (default 5) and after the
last step; a rerun continues from the newest finished checkpoint (delete ``rl/`` to start over).
``rl.stop_after`` / env ``REWARDSQL_RL_STOP_AFTER=N`` checkpoints and stops after N steps of this process
(raising ``RLStopped``): the test hook that simulates a killed run. Artefacts: ``rl/policy`` (HF dir) and
``rl/metrics.json`` (reward and OR-rate curves, first-vs-last OR rate, seconds, rollout tokens/s).
"""
from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary
from rewardsql_jax.models.sharding import shard_model
from rewardsql_jax.rewards.prm_scoring import PRMScorer
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .context import RunContext
from .policy import load_model, save_model
from rewardsql_jax.training.collate import rl_length
from .preemption import Preempted, deferred_sigterm, stop_requested
from .rl_checkpoint import RLCheckpoints
from .rl_online import (ONLINE_ALGORITHMS, PRM_ALGORITHMS, check_online_config, loss_setup, pick_questions,
                        sampler_prompts, step_rewards)
from .rl_rollouts import sample_rollouts, score_rows

STOP_ENV = "REWARDSQL_RL_STOP_AFTER"


class RLStopped(RuntimeError):
    """Raised when ``rl.stop_after`` / ``REWARDSQL_RL_STOP_AFTER`` stops the stage early (after a checkpoint)."""


@dataclasses.dataclass(frozen=True)
class RLData:
    """Training questions whose prompt fits the model with ``max_new_tokens``; their prompt ids; the batch length."""

    records: list
    prompt_ids: list
    length: int
    dropped_too_long: int


def rl_data(ctx: RunContext) -> RLData:
    cfg, tok = ctx.config, ctx.tokenizer()
    records = ctx.records("cold_start", "train.jsonl")
    ids = [tok(r["prompt"], add_special_tokens=False).input_ids for r in records]
    budget = cfg.model.max_len - cfg.rl.max_new_tokens
    keep = [i for i, p in enumerate(ids) if len(p) <= budget]
    if not keep:
        raise ValueError(f"no training prompt fits model.max_len={cfg.model.max_len} with rl.max_new_tokens="
                         f"{cfg.rl.max_new_tokens}; raise model.max_len or lower rl.max_new_tokens")
    return RLData([records[i] for i in keep], [ids[i] for i in keep],
                  rl_length(max(len(ids[i]) for i in keep), cfg.rl.max_new_tokens), len(records) - len(keep))


def load_prm_scorer(ctx: RunContext):
    """PRMScorer of ``prm/model``, or a clear error when the prm stage has not run."""
    path = ctx.run_dir / "prm" / "model"
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"rl.algorithm={ctx.config.rl.algorithm!r} needs the PRM at {path}: run the prm stage "
                                f"first (stages=(..., 'prm_labels', 'prm', 'rl')), or use rl.algorithm=grpo_outcome "
                                f"or reinforce_pp, which need no PRM")
    return PRMScorer(load_model(path, ctx.config.model.dtype), ctx.tokenizer())


def new_state(ctx: RunContext):
    """Train state of the SFT policy with the SFT policy as frozen reference (constant lr, grad clip 1.0),
    sharded over the run's mesh when there is more than one device."""
    model, mesh = load_model(ctx.require("sft", "policy"), ctx.config.model.dtype), ctx.mesh()
    if mesh is not None:
        model = shard_model(model, mesh)
    opt = OptimizerConfig(learning_rate=ctx.config.rl.lr, max_grad_norm=1.0)
    return create_train_state(model, make_optimizer(opt), seed=ctx.config.seed, with_reference=True)


def train_step(ctx: RunContext, state, loss_name: str, options: dict | None = None):
    """The jitted step on the run's mesh, splitting each batch into ``mesh.micro_batches``."""
    return make_train_step(state.graphdef, loss_name, options, mesh=ctx.mesh(),
                           micro_batches=ctx.config.mesh.micro_batches)


def stop_after(ctx: RunContext) -> int:
    """Steps this process may run before stopping (0 = no limit)."""
    return int(os.environ.get(STOP_ENV, "0") or 0) or ctx.config.rl.stop_after


def checkpoint_every(ctx: RunContext) -> int:
    return ctx.config.rl.checkpoint_every


def resume(ctx: RunContext, out, state):
    """``(checkpoints, state, start step, history)``: the stage's newest Orbax checkpoint restored into ``state``
    when there is one, said on stdout and in ``log.jsonl`` (``metrics.json`` records it as ``resumed_from_step``);
    else ``state`` from step 0."""
    ckpt = RLCheckpoints(out)
    restored = ckpt.restore(state)
    if restored is None:
        return ckpt, state, 0, []
    state, start, history = restored
    print(f"[rl] resumed from step {start}/{ctx.config.rl.steps} (checkpoint in {ckpt.ck.directory})", flush=True)
    ctx.log({"stage": "rl", "resumed_at_step": start})
    return ckpt, state, start, history


def _scalar(metrics, name):
    return float(metrics[name]) if name in metrics else float("nan")


def run_rl(ctx: RunContext) -> dict:
    rl = ctx.config.rl
    if rl.algorithm in ("dpo", "rs"):
        from .rl_offline import run_offline
        with deferred_sigterm():  # a SIGTERM stops at the next step boundary, after a checkpoint
            return run_offline(ctx)
    assert rl.algorithm in ONLINE_ALGORITHMS
    check_online_config(rl)
    m = ctx.config.mesh.micro_batches
    if rl.shared_prefix and rl.prompts_per_step % m:
        raise ValueError(f"rl.shared_prefix=true splits micro-batches by prompt group: mesh.micro_batches={m} must "
                         f"divide rl.prompts_per_step={rl.prompts_per_step} (or set rl.shared_prefix=false)")
    with deferred_sigterm():
        return _run_online(ctx)


def _run_online(ctx: RunContext) -> dict:
    cfg, rl, out = ctx.config, ctx.config.rl, ctx.stage_dir("rl")
    tok, pool, data = ctx.tokenizer(), ctx.pool(), rl_data(ctx)
    scorer = load_prm_scorer(ctx) if rl.algorithm in PRM_ALGORITHMS else None
    state = new_state(ctx)
    loss_name, options = loss_setup(rl)
    step_fn = train_step(ctx, state, loss_name, options)
    ckpt, state, start, history = resume(ctx, out, state)
    clauses = rl.algorithm == "reinforce_pp"
    host_fn = lambda recs, toks: score_rows(tok, pool, recs, toks, clauses=clauses, ex_mode=cfg.data.ex_mode)  # noqa: E731
    limit, every, ran = stop_after(ctx), checkpoint_every(ctx), 0
    bar = tqdm(range(start, rl.steps), initial=start, total=rl.steps, desc=f"rl ({rl.algorithm})")
    try:
        for step in bar:
            state = _online_step(ctx, data, state, step_fn, step, host_fn, scorer, history, bar)
            ran += 1
            checkpoint_or_stop(ckpt, state, step, rl.steps, history, ran=ran, limit=limit, every=every)
    finally:
        ckpt.close()
    jax.block_until_ready(state.params)
    save_model(ctx, state.model(), out / "policy")
    if is_primary():
        plot_learning_curve(history, out / "learning_curve.png", title=f"rl ({rl.algorithm})")
    return ctx.finish("rl", online_metrics(rl, history, resumed_from=start, dropped=data.dropped_too_long))


def smoothed(values, window: int) -> np.ndarray:
    """Trailing mean over ``window`` steps (fewer at the start), the curve a reader can see a trend in."""
    c = np.concatenate([[0.0], np.cumsum(np.asarray(values, np.float64))])
    end = np.arange(1, len(c))
    begin = np.maximum(end - window, 0)
    return (c[end] - c[begin]) / (end - begin)


def plot_learning_curve(history: list, path, *, title: str = "rl") -> None:
    """OR rate and reward per RL step (points) with their trailing means (lines) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    window = max(1, len(history) // 8)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, label in zip(axes, ("or_rate", "reward"), ("OR rate of the rollouts", "mean reward")):
        values = [h[key] for h in history]
        ax.plot(steps, values, ".", alpha=0.4, label="per step")
        ax.plot(steps, smoothed(values, window), "-", label=f"mean of the last {window}")
        ax.set_xlabel("RL step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def checkpoint_or_stop(ckpt: RLCheckpoints, state, step: int, steps: int, history: list, *, ran: int, limit: int,
                       every: int) -> None:
    """Checkpoint after every ``every``-th and the last step; stop after ``limit`` steps of this process
    (``RLStopped``) or on a SIGTERM of any process (``Preempted``), once the checkpoint is on disk."""
    last, stop = step == steps - 1, bool(limit) and ran >= limit
    preempted = not last and stop_requested()
    if last or (step + 1) % every == 0 or stop or preempted:
        ckpt.save(state, step + 1, history)
    if (stop or preempted) and not last:
        ckpt.wait()
        barrier(f"rl checkpoint {step + 1}")
        if preempted:
            raise Preempted(f"rl preempted (SIGTERM) at step {step + 1}/{steps}: checkpoint written to "
                            f"{ckpt.ck.directory}; the run is resumable: rerun the same command")
        raise RLStopped(f"rl stopped after {ran} step(s) at step {step + 1}/{steps} ({STOP_ENV} / rl.stop_after); "
                        f"rerun to resume from the checkpoint in {ckpt.ck.directory}")


def _online_step(ctx, data, state, step_fn, step, host_fn, scorer, history, bar):
    """Sample, score and train on one rollout batch; append the step's record to ``history``."""
    cfg, rl, tok = ctx.config, ctx.config.rl, ctx.tokenizer()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    t0 = time.perf_counter()
    idx = pick_questions(len(data.records), rl.prompts_per_step, cfg.seed, step)
    ro = sample_rollouts(state.model(), tok, [data.records[i] for i in idx], [data.prompt_ids[i] for i in idx],
                         samples=rl.samples_per_prompt, temperature=rl.temperature,
                         max_new_tokens=rl.max_new_tokens, seed=cfg.seed * 100_003 + step, host_fn=host_fn,
                         prompts_per_call=sampler_prompts(rl))
    sr = step_rewards(rl.algorithm, rl.advantage_variant, ro, group_size=rl.samples_per_prompt, scorer=scorer,
                      length=data.length, pad_id=pad,
                      completion_length=rl.max_new_tokens if rl.shared_prefix else None, rm_coef=rl.rm_coef)
    t_train = time.perf_counter()
    state, m = step_fn(state, sr.batch)
    jax.block_until_ready(m["loss"])
    train_seconds = time.perf_counter() - t_train
    rec = {"step": step, "reward": float(sr.rewards.mean()), "or_rate": float(ro.outcomes.rewards.mean()),
           "executable_rate": float(ro.outcomes.executable.mean()), "loss": float(m["loss"]),
           "kl": _scalar(m, "kl"), "clip_ratio": _scalar(m, "clip_ratio/region"),
           "grad_norm": float(m["grad_norm"]), "loss_is_finite": bool(m["loss_is_finite"]),
           "tokens": ro.tokens, "sample_seconds": ro.sample_seconds, "host_wait_seconds": ro.wait_seconds,
           "prm_seconds": sr.score_seconds, "train_seconds": train_seconds, "step_seconds": time.perf_counter() - t0}
    # the device works while sampling, PRM scoring and training; the rest of the step is host-only time
    rec["device_idle_fraction"] = max(0.0, 1.0 - (ro.sample_seconds + sr.score_seconds + train_seconds)
                                      / rec["step_seconds"])
    history.append(rec)
    ctx.log({"stage": "rl", **rec})
    bar.set_postfix(reward=f"{rec['reward']:.3f}", OR=f"{rec['or_rate']:.2f}", loss=f"{rec['loss']:.4f}")
    return state


def online_metrics(rl, history: list, *, resumed_from: int, dropped: int) -> dict:
    """Summary of the online run: curves, OR rate of the first vs last steps, time and rollout throughput."""
    k = max(1, len(history) // 4)
    seconds = sum(h["step_seconds"] for h in history)
    sample_s = sum(h["sample_seconds"] for h in history)
    return {"algorithm": rl.algorithm, "advantage_variant": rl.advantage_variant, "steps": len(history),
            "resumed_from_step": resumed_from, "dropped_too_long": dropped,
            "reward_curve": [(h["step"], h["reward"]) for h in history],
            "or_rate_curve": [(h["step"], h["or_rate"]) for h in history],
            "or_rate_first": float(np.mean([h["or_rate"] for h in history[:k]])),
            "or_rate_last": float(np.mean([h["or_rate"] for h in history[-k:]])),
            "reward_first": float(np.mean([h["reward"] for h in history[:k]])),
            "reward_last": float(np.mean([h["reward"] for h in history[-k:]])),
            "final_loss": history[-1]["loss"], "final_kl": history[-1]["kl"],
            "nonfinite_steps": sum(not h["loss_is_finite"] for h in history),
            "seconds": seconds, "rollout_tokens": sum(h["tokens"] for h in history),
            "rollout_tokens_per_s": sum(h["tokens"] for h in history) / max(sample_s, 1e-9),
            # without the first step of this history, whose sampling time includes the sampler's compilation
            "rollout_tokens_per_s_warm": (sum(h["tokens"] for h in history[1:])
                                          / max(sum(h["sample_seconds"] for h in history[1:]), 1e-9)),
            "host_wait_seconds": sum(h["host_wait_seconds"] for h in history),
            # share of the steps' wall time (after the first, which compiles) with no sampling, PRM scoring or
            # training running: host decoding, batch assembly and waiting for SQL results
            "device_idle_fraction": float(np.mean([h["device_idle_fraction"] for h in history[1:]]
                                                  if len(history) > 1 else [history[0]["device_idle_fraction"]]))}
