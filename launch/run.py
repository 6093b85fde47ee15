"""Launch the rewardsql_jax pipeline.

    python launch/run.py                                   # built-in default benchmark, no download
    python launch/run.py --config configs/smoke.py         # < 2 minutes
    python launch/run.py --config configs/default.py rl.algorithm=grpo_outcome sft.steps=100
    python launch/run.py --config configs/conductor_default.py            # SQLConductor
    python launch/run.py --config configs/bird_qwen2_5_coder_7b.py plan=true plan.devices=8 plan.hbm=h100
    python launch/run.py --config configs/smoke.py plugins=my_pg.py rl.algorithm=grpo_outcome rl.loss=my_pg

A mistake a user can make (a missing file or database, a bad value) ends with one line saying what to do;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewardsql_jax.compilation_cache import cache_directory, default_cache_dir, use_compilation_cache
from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.distributed import is_primary, maybe_initialize_distributed, speaker
from rewardsql_jax.planning.launch import split_plan_overrides
from rewardsql_jax.planning.memory_check import WillNotFit
from rewardsql_jax.planning.stage_memory import plan_stages
from rewardsql_jax.plugins import load_plugins, plugin_overrides
from rewardsql_jax.stages.report import print_summary
from rewardsql_jax.stages.runner import run_pipeline
from rewardsql_jax.stages.stage_config import StageConfigChanged
from rewardsql_jax.training.preemption import EXIT_CODE as PREEMPTED_EXIT
from rewardsql_jax.training.preemption import Preempted


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.py"), help="a config file in configs/")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error instead of one line")
    parser.add_argument(
        "--compilation-cache",
        default=default_cache_dir(),
        metavar="DIR",
        help="keep XLA's compiled programs here for later stages and runs ('' = off; default %(default)s)",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. sft.steps=50 run_dir=runs/x")
    args = parser.parse_intermixed_args(argv)  # options may come between the overrides
    try:
        cache = cache_directory(args.compilation_cache)
        load_plugins(plugin_overrides(args.overrides))  # before the config: rl.algorithm / rl.loss may be theirs
        plan_opts, overrides = split_plan_overrides(args.overrides)
        config = apply_overrides(load_config(args.config), overrides)
        load_plugins(getattr(config, "plugins", ()))
    except (ValueError, FileNotFoundError, ImportError) as e:
        if args.debug:
            raise
        parser.error(str(e))
    try:
        return _run(config, plan_opts, cache)
    except Preempted as e:  # SIGTERM during RL: checkpointed; the same command resumes
        print(f"{speaker()}{e}", file=sys.stderr)
        return PREEMPTED_EXIT
    except USER_ERRORS as e:  # the message says what to do; --debug for the traceback
        if args.debug:
            raise
        print(f"{speaker()}error: {e}{'' if isinstance(e, SAYS_IT_ALL) else DEBUG_HINT}", file=sys.stderr)
        return 1


# Errors a user can cause (a missing file, database or checkpoint; a bad value); anything else is a bug and keeps
# its traceback.
USER_ERRORS = (FileNotFoundError, ValueError, ImportError, WillNotFit, StageConfigChanged)
SAYS_IT_ALL = (WillNotFit, StageConfigChanged)
DEBUG_HINT = " (rerun with --debug for the traceback)"


def _run(config, plan_opts, cache=None) -> int:
    if plan_opts is None:  # one process per host on a pod (JAX_* / TPU environment): join the others
        maybe_initialize_distributed()
    use_compilation_cache(cache)  # after joining: single-process runs only
    if getattr(config, "pipeline", None) == "conductor":  # SQLConductor (configs/conductor_*.py)
        from rewardsql_jax.conductor.run import print_summary as conductor_summary
        from rewardsql_jax.conductor.run import run_conductor

        results = run_conductor(config)
        if is_primary():
            conductor_summary(config, results)
        return 0
    if plan_opts is not None:  # AOT memory/FLOPs plan on simulated devices, a row per stage; allocates nothing
        plan_stages(config, plan_opts)
        return 0
    results = run_pipeline(config)
    if is_primary():
        print_summary(config, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
