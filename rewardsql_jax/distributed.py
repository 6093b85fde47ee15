"""Multi-host start-up: ``jax.distributed.initialize()`` when the process is one of several.

TPU pod slices: every host runs the same command; JAX discovers the slice itself, so
``REWARDSQL_DISTRIBUTED=1`` (or a TPU worker environment) is enough. Multi-node GPU: set
``JAX_COORDINATOR_ADDRESS=host:port``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` on each node (SLURM's
variables are picked up by JAX automatically). A single process does nothing.
"""
from __future__ import annotations

import os


def _wants_distributed(env) -> bool:
    if env.get("REWARDSQL_DISTRIBUTED") == "1":
        return True
    if env.get("JAX_COORDINATOR_ADDRESS") and int(env.get("JAX_NUM_PROCESSES", "1")) > 1:
        return True
    return len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1


def maybe_initialize_distributed(env=None) -> bool:
    """Initialise JAX's multi-process runtime if the environment describes several processes."""
    env = os.environ if env is None else env
    if not _wants_distributed(env):
        return False
    import jax

    kwargs = {}
    if env.get("JAX_COORDINATOR_ADDRESS"):
        kwargs = dict(coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
                      num_processes=int(env["JAX_NUM_PROCESSES"]), process_id=int(env["JAX_PROCESS_ID"]))
    jax.distributed.initialize(**kwargs)
    return True
