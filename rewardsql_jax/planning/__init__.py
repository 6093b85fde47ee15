"""AOT memory / FLOPs planning: compile the real train step and sampler for abstract inputs on a mesh.

Run ``python -m rewardsql_jax.planning --help``; from Python, call ``plan_memory`` / ``plan_from_run_config``
in a process that has enough (simulated) devices (see ``planning.devices``).
"""

from rewardsql_jax.models.presets import PRESETS, preset_config

from .aot import analytic_kv_cache_bytes, analytic_train_flops, plan_memory, planning_mesh, shard_bytes
from .devices import planning_devices
from .from_run import base_model_config_of, model_config_of, plan_from_run_config
from .launch import run_plan, split_plan_overrides
from .report import HBM_GB, FitCheck, assert_fits, check_fits, format_plan, print_plan
from .result import CompiledStats, Plan
