"""Before the first training stage: an AOT memory estimate of each train step that will run, compared with the
memory of a device, so a run that would go out of memory fails in seconds, with the fix, before anything is
allocated (``planning``: the real jitted steps compiled for abstract inputs on the run's mesh).

``memory_check`` (RunConfig):
  auto  on accelerators, compare with the device's own limit (``memory_stats()["bytes_limit"]``); on CPU skip
        it (logged: compiling the steps costs seconds, ~10 s for configs/default.py, and host RAM is rarely the
        limit of a CPU run) unless ``memory_limit_gb`` is set. A step the planner cannot compile is logged.
  on    check on CPU too, against the available host RAM split over the CPU devices; planner errors raise.
  off   no check.
``memory_limit_gb`` > 0 replaces the device's limit (e.g. a target accelerator's memory).

What is compiled, at ``model.max_len`` (bucketed: an upper bound, the stages pad to their longest example):
  sft  one step of ``sft.batch_size`` rows;  prm  one step of ``prm.batch_size`` rows (PRM loss);
  rl   online algorithms training the grpo loss: ``planning.plan_from_run_config`` (train step and sampler,
       ``check_fits``); other online ones (reinforce_pp, a plugin loss): their train step of prompts x samples
       rows; offline ones: one step of ``rl.prompts_per_step`` items of the algorithm's ``batch_type``. (The
       sampling stages prm_labels / inference are not checked.)
"""

from __future__ import annotations

import os
import time

import numpy as np

TRAINING_STAGES = ("sft", "prm", "rl")
MODES = ("auto", "on", "off")
HOW_TO_DISABLE = "set memory_check=off to skip this check"
_PRM_MAX_STEPS = 16  # step tags per PRM row in the estimate (a few KB: does not move the peak)


class WillNotFit(MemoryError):
    """A train step's AOT estimate exceeds the device memory (raised before anything is allocated)."""


def host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), else free physical pages; None when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_limit_bytes(device) -> int | None:
    """The allocator's limit of an accelerator (``memory_stats()["bytes_limit"]``), None when not reported."""
    try:
        stats = device.memory_stats()
    except Exception:  # backends without memory stats raise various errors
        return None
    return int(stats["bytes_limit"]) if stats and stats.get("bytes_limit") else None


def memory_limit(config, devices) -> tuple[int | None, str]:
    """(bytes per device to compare with, where they come from), or (None, why the check is skipped)."""
    import jax

    if config.memory_limit_gb > 0:
        return int(config.memory_limit_gb * 1e9), f"memory_limit_gb={config.memory_limit_gb:g}"
    local = jax.local_devices()[0]
    if local.platform != "cpu":
        limit = device_limit_bytes(local)
        if limit is None:
            return None, f"the {local.device_kind} device reports no memory limit; set memory_limit_gb to check"
        return limit, f"{local.device_kind} memory_stats bytes_limit"
    if config.memory_check == "auto":
        return None, (
            "skipped on CPU (compiling the steps costs seconds and host RAM is rarely the limit); "
            "memory_check=on checks against host RAM"
        )
    avail = host_available_bytes()
    if avail is None:
        return None, "available host RAM unknown; set memory_limit_gb to check"
    cpus = sum(d.platform == "cpu" for d in devices)
    return avail // max(cpus, 1), f"available host RAM / {cpus} CPU device(s)"


def _fields(kind: str, rows: int, seq: int) -> dict:
    i32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    tok = {"input_ids": ((rows, seq), i32), "attention_mask": ((rows, seq), i32)}
    if kind == "sft":
        return {**tok, "loss_mask": ((rows, seq), i32)}
    if kind == "prm":
        steps = ((rows, _PRM_MAX_STEPS), i32)
        return {**tok, "tag_positions": steps, "labels": steps, "step_mask": steps}
    if kind in ("advantages", "token_rewards"):  # an online algorithm's RLBatch
        return {
            **tok,
            "completion_mask": ((rows, seq), i32),
            "old_logprobs": ((rows, seq), f32),
            kind: ((rows, seq), f32),
        }

    def side(s):
        return {
            f"{s}_input_ids": ((rows, seq), i32),
            f"{s}_attention_mask": ((rows, seq), i32),
            f"{s}_loss_mask": ((rows, seq), i32),
        }

    return {**side("chosen"), **side("rejected")}  # preference


def _step_spec(config, stage: str):
    """(batch class, field kind, rows, loss, options, reference, what to lower to fit) of a step the planner's
    RL plan does not cover."""
    from rewardsql_jax.rl import get_algorithm, policy_loss
    from rewardsql_jax.training.batch import PRMBatch, PreferenceBatch, RLBatch, SFTBatch

    if stage == "sft":
        return SFTBatch, "sft", config.sft.batch_size, "sft", None, False, "sft.batch_size"
    if stage == "prm":
        return PRMBatch, "prm", config.prm.batch_size, "prm", {"tag_token_ids": (1, 2)}, False, "prm.batch_size"
    rl = config.rl
    algorithm, (loss, options) = get_algorithm(rl.algorithm), policy_loss(rl)
    if algorithm.online:
        return (
            RLBatch,
            algorithm.batch_field,
            rl.prompts_per_step * rl.samples_per_prompt,
            loss,
            options,
            True,
            "rl.prompts_per_step",
        )
    kind = {PreferenceBatch: "preference", SFTBatch: "sft"}[algorithm.batch_type]
    return algorithm.batch_type, kind, rl.prompts_per_step, loss, options, True, "rl.prompts_per_step"


def _planned_by_the_rl_plan(config) -> bool:
    from rewardsql_jax.rl import get_algorithm, policy_loss

    return get_algorithm(config.rl.algorithm).online and policy_loss(config.rl)[0] == "grpo"


def check_stage(config, stage: str, devices, limit: int):
    """``planning.FitCheck`` of one training stage's step(s) against ``limit`` bytes per device."""
    from rewardsql_jax.planning import FitCheck, check_fits, model_config_of, plan_from_run_config, planning_mesh
    from rewardsql_jax.planning.result import GB
    from rewardsql_jax.planning.steps import train_step_stats
    from rewardsql_jax.training.collate import bucket_length

    if stage == "rl" and _planned_by_the_rl_plan(config):
        return check_fits(plan_from_run_config(config, devices=devices), limit / 1e9)
    batch_type, kind, rows, loss, options, reference, knob = _step_spec(config, stage)
    m, seq = config.mesh, bucket_length(config.model.max_len)
    mesh = planning_mesh((m.data, m.fsdp, m.tensor), devices)
    stats = train_step_stats(
        model_config_of(config),
        mesh,
        batch_type,
        _fields(kind, rows, seq),
        loss=loss,
        loss_options=options,
        micro_batches=m.micro_batches,
        reference=reference,
        name=f"{stage} train step",
    )
    peak, what = stats.peak_bytes, f"{stage} train step ({loss} loss, {rows} rows x {seq} tokens)"
    if peak <= limit:
        return FitCheck(True, f"fits: peak {peak / GB:.2f} GB per device ({what}) <= {limit / GB:.2f} GB", peak, limit)
    return FitCheck(
        False,
        f"will OOM: the {what} needs {peak / GB:.2f} GB per device but a device has "
        f"{limit / GB:.2f} GB (temp {stats.temp_bytes / GB:.2f} GB, {m.micro_batches} "
        f"micro-batch(es)). To fit: raise mesh.micro_batches, lower {knob}, shard wider, or "
        f"lower model.max_len.",
        peak,
        limit,
    )


def check_memory(config, stages, *, log=print, devices=None) -> dict:
    """Check the training stages among ``stages`` (those about to run); returns {stage: FitCheck}.

    Raises ``WillNotFit`` (a MemoryError) with the planner's message and how to disable the check when a step
    will not fit.
    """
    todo = [s for s in TRAINING_STAGES if s in stages]
    if config.memory_check == "off" or not todo:
        return {}
    import jax

    devices = list(devices) if devices is not None else jax.devices()
    limit, source = memory_limit(config, devices)
    if limit is None:
        log(f"[memory_check] {source}")
        return {}
    results = {}
    for stage in todo:
        t0 = time.perf_counter()
        try:
            fit = check_stage(config, stage, devices, limit)
        except (ValueError, NotImplementedError, RuntimeError, FileNotFoundError) as e:
            if config.memory_check == "on":
                raise
            log(f"[memory_check] {stage}: could not plan its step ({type(e).__name__}: {e}); not checked")
            continue
        if not fit.ok:
            raise WillNotFit(
                f"{fit.message} [AOT memory check of the {stage} stage before training, against "
                f"{source}; {HOW_TO_DISABLE}]"
            )
        log(f"[memory_check] {stage}: {fit.message} ({source}; {time.perf_counter() - t0:.1f}s)")
        results[stage] = fit
    return results
