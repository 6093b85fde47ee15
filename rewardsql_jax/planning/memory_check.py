"""Before the first stage: the peak memory per device of every stage that will run, counting every model it holds
at once (``stage_memory``: compiled train steps, analytic sampling / scoring parts), compared with the memory of a
device, so a run that would go out of memory fails in seconds, naming the stage and the fix, before anything is
allocated.

``memory_check`` (RunConfig):
  auto  on accelerators, compare with the device's own limit (``memory_stats()["bytes_limit"]``); on CPU skip
        it (logged: compiling the steps costs seconds, ~10 s for configs/default.py, and host RAM is rarely the
        limit of a CPU run) unless ``memory_limit_gb`` is set. A stage the planner cannot plan is logged.
  on    check on CPU too, against the available host RAM split over the CPU devices; planner errors raise.
  off   no check.
``memory_limit_gb`` > 0 replaces the device's limit (e.g. a target accelerator's memory).

Checked stages and what they hold: ``stage_memory`` (sft, prm_labels, prm, rl, inference). The train steps are
compiled at ``model.max_len`` (bucketed: an upper bound, the stages pad to their longest example): sft one step of
``sft.batch_size`` rows; prm one step of ``prm.batch_size`` rows; rl the online RL plan
(``planning.plan_from_run_config``: train step and sampler) for online algorithms (any policy-gradient loss), else the
algorithm's train step; the sampling models count on this process's local devices.
"""

from __future__ import annotations

import os
import time

from .stage_memory import ROW_STAGES, stage_rows
from .train_memory import planned_by_the_rl_plan, raise_micro_batches, train_step_memory

MODES = ("auto", "on", "off")
HOW_TO_DISABLE = "set memory_check=off to skip this check"


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


def check_stage(config, stage: str, devices, limit: int):
    """``planning.FitCheck`` of one training stage's step(s) against ``limit`` bytes per device."""
    from rewardsql_jax.planning import FitCheck, check_fits, plan_from_run_config
    from rewardsql_jax.planning.result import GB

    if stage == "rl" and planned_by_the_rl_plan(config):
        return check_fits(plan_from_run_config(config, devices=devices), limit / 1e9)
    step = train_step_memory(config, stage, devices)
    peak = step.stats.peak_bytes
    if peak <= limit:
        return FitCheck(
            True, f"fits: peak {peak / GB:.2f} GB per device ({step.what}) <= {limit / GB:.2f} GB", peak, limit
        )
    return FitCheck(
        False,
        f"will OOM: the {step.what} needs {peak / GB:.2f} GB per device but a device has "
        f"{limit / GB:.2f} GB (temp {step.stats.temp_bytes / GB:.2f} GB, {config.micro_batches(stage)} "
        f"micro-batch(es)). To fit: {raise_micro_batches(config, stage)}, set model.remat=true, lower {step.knob}, "
        f"shard wider, or "
        f"lower model.max_len.",
        peak,
        limit,
    )


def local_device_count(devices) -> int:
    """Devices of this process among ``devices`` (the mesh the sampling models load on)."""
    import jax

    return max(sum(d.process_index == jax.process_index() for d in devices), 1)


def stage_error(row, limit: int, source: str) -> str:
    """The one message of a stage that will not fit: the stage, its bytes, what it holds and what to change."""
    from rewardsql_jax.planning.report import stage_summary
    from rewardsql_jax.planning.result import GB

    return (
        f"will OOM: the {row.phase} of the {row.stage} stage needs {row.peak_bytes / GB:.2f} GB per device but a "
        f"device has {limit / GB:.2f} GB ({stage_summary(row)}). To fit: {row.advice}. [memory check of the "
        f"{row.stage} stage before the run, against {source}; {HOW_TO_DISABLE}]"
    )


def check_memory(config, stages, *, log=print, devices=None) -> dict:
    """Check the stages among ``stages`` (those about to run) that hold models on the devices; returns
    {stage: planning.StageMemory} and logs a line per stage (peak, its terms, the models held).

    Raises ``WillNotFit`` (a MemoryError) naming the stage, its bytes and what to change when one will not fit.
    """
    todo = [s for s in ROW_STAGES if s in stages]
    if config.memory_check == "off" or not todo:
        return {}
    import jax

    from rewardsql_jax.planning.report import stage_summary

    devices = list(devices) if devices is not None else jax.devices()
    limit, source = memory_limit(config, devices)
    if limit is None:
        log(f"[memory_check] {source}")
        return {}
    results = {}
    for stage in todo:
        t0 = time.perf_counter()
        try:
            (row,) = stage_rows(config, (stage,), devices, local_device_count(devices))
        except (ValueError, NotImplementedError, RuntimeError, FileNotFoundError) as e:
            if config.memory_check == "on":
                raise
            log(f"[memory_check] {stage}: could not plan it ({type(e).__name__}: {e}); not checked")
            continue
        if not row.fits(limit):
            raise WillNotFit(stage_error(row, limit, source))
        log(
            f"[memory_check] {stage}: fits: {stage_summary(row)} <= {limit / 1e9:.2f} GB ({source}; "
            f"{time.perf_counter() - t0:.1f}s)"
        )
        results[stage] = row
    return results
