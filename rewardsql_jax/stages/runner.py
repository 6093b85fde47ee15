"""Run the configured stages in pipeline order, skipping the ones a previous run already finished.

``run_in_order`` is the stage runner of both pipelines: Reward-SQL's ``run_pipeline`` below and SQLConductor's
``conductor.pipeline.run_stages`` give it their ``Stage``s.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from rewardsql_jax.distributed import barrier, is_primary, speaker
from rewardsql_jax.planning.memory_check import check_memory
from rewardsql_jax.plugins import load_plugins

from .context import RunContext
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


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a pipeline: ``run(results)`` does its work (writing ``<run_dir>/<name>/metrics.json`` when
    it has finished) and returns its result; ``read_back(results)`` returns the result of a run that finished it
    earlier. ``results``: the earlier stages' results by name."""

    name: str
    run: Callable[[dict], Any]
    read_back: Callable[[dict], Any]


def run_in_order(
    stages: Sequence[Stage], *, is_done: Callable[[str], bool], run_dir, log=print, label=lambda name: f"[{name}]"
) -> dict:
    """Run ``stages`` in order, each finished one (``is_done``) read back instead (a killed run resumes at the
    stage it was in); logs each stage's start and wall time under ``label(name)``. Returns {name: result}."""
    results: dict = {}
    for stage in stages:
        if is_done(stage.name):
            log(f"{label(stage.name)} already done in {run_dir} (resume): skipping")
            results[stage.name] = stage.read_back(results)
            continue
        log(f"{speaker()}{label(stage.name)} running")
        t0 = time.perf_counter()
        results[stage.name] = stage.run(results)
        log(f"{speaker()}{label(stage.name)} done in {time.perf_counter() - t0:.1f}s")
    return results


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
    try:
        order = [s for s in STAGES if s in config.stages]
        # Before anything is trained or allocated: do the batches split, will the training steps fit a device?
        config.check_micro_batches([s for s in order if not ctx.is_done(s)])
        if any(not ctx.is_done(s) for s in ("cold_start", "sft") if s in order):  # the stages that read model.path
            check_model_path(config.model.path)
        check_memory(config, [s for s in order if not ctx.is_done(s)], log=log)
        check_finished_stages(ctx, order, log=log)

        def run(name, _earlier):
            if name in HOST_STAGES and not is_primary():
                barrier(f"finished {name}")  # the primary runs it and writes its files; wait for them
                return ctx.metrics(name)
            ctx.begin(name)
            return stage_function(name)(ctx)

        def read_back(name, _earlier):
            return ctx.metrics(name)

        stages = [Stage(n, functools.partial(run, n), functools.partial(read_back, n)) for n in order]
        results = run_in_order(stages, is_done=ctx.is_done, run_dir=ctx.run_dir, log=log)
    finally:
        ctx.close()
    return results
