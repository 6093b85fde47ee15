"""Run the configured stages in pipeline order, skipping the ones a previous run already finished."""

from __future__ import annotations

import importlib
import time

from rewardsql_jax.distributed import barrier, is_primary, speaker
from rewardsql_jax.plugins import load_plugins

from .context import RunContext
from .memory_check import check_memory
from .policy import check_model_path
from .run_config import STAGES, RunConfig
from .stage_config import changed_keys, refuse_changed

# stage name -> "module:function"; imported lazily so a run only pays for the stages it uses.
STAGE_FUNCTIONS = {
    "cold_start": "cold_start:run_cold_start",
    "sft": "sft:run_sft",
    "prm_labels": "prm_labels:run_prm_labels",
    "prm": "prm:run_prm",
    "rl": "rl:run_rl",
    "inference": "inference:run_inference",
    "evaluate": "evaluate:run_evaluate",
}


# Stages without device work: with several processes the primary runs them (they write the shared files the
# other stages read) while the others wait; every other stage runs on every process over the shared mesh.
HOST_STAGES = ("cold_start", "evaluate")


def stage_function(name: str):
    module, fn = STAGE_FUNCTIONS[name].split(":")
    return getattr(importlib.import_module(f"rewardsql_jax.stages.{module}"), fn)


def check_finished_stages(ctx: RunContext, order, *, log=print) -> None:
    """Before anything runs: a finished stage made with other settings than the config's stops the run
    (``StageConfigChanged``, naming the keys), unless ``resume=accept_changes`` keeps it (said in the log)."""
    for name in order:
        if not ctx.is_done(name):
            continue
        recorded = ctx.metrics(name).get("settings", {})
        changed = changed_keys(recorded, ctx.config, name)
        if not changed:
            continue
        if ctx.config.resume == "accept_changes":
            log(f"[{name}] kept although {', '.join(changed)} changed since it ran (resume=accept_changes)")
            continue
        raise refuse_changed(ctx.run_dir, name, changed, recorded, ctx.config)


def run_pipeline(config: RunConfig, *, log=print) -> dict:
    """Run ``config.stages`` in the order of ``STAGES``; returns {stage: metrics}. Resumable. First the AOT
    memory check of the training stages that will run (``memory_check.py``; MemoryError when one will not fit)."""
    load_plugins(config.plugins)  # idempotent; launch/run.py has imported them before reading the config
    ctx = RunContext.create(config)
    results = {}
    try:
        order = [s for s in STAGES if s in config.stages]
        # Before anything is trained or allocated: do the batches split, will the training steps fit a device?
        config.check_micro_batches([s for s in order if not ctx.is_done(s)])
        if any(not ctx.is_done(s) for s in ("cold_start", "sft") if s in order):  # the stages that read model.path
            check_model_path(config.model.path)
        check_memory(config, [s for s in order if not ctx.is_done(s)], log=log)
        check_finished_stages(ctx, order, log=log)
        for name in order:
            if ctx.is_done(name):
                log(f"[{name}] already done in {ctx.run_dir} (resume): skipping")
                results[name] = ctx.metrics(name)
                continue
            log(f"{speaker()}[{name}] running")
            t0 = time.perf_counter()
            if name in HOST_STAGES and not is_primary():
                barrier(f"finished {name}")  # the primary runs it and writes its files; wait for them
                results[name] = ctx.metrics(name)
            else:
                results[name] = stage_function(name)(ctx)
            log(f"{speaker()}[{name}] done in {time.perf_counter() - t0:.1f}s")
    finally:
        ctx.close()
    return results
