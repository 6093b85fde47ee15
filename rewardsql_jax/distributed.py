"""Multi-host start-up: ``jax.distributed.initialize()`` when the process is one of several.

TPU pod slices: every host runs the same command; JAX discovers the slice itself, so
``REWARDSQL_DISTRIBUTED=1`` (or a TPU worker environment) is enough. Multi-node GPU: set
``JAX_COORDINATOR_ADDRESS=host:port``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` on each node (SLURM's
variables are picked up by JAX automatically). A single process does nothing.
"""

from __future__ import annotations

import itertools
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
        kwargs = dict(
            coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(env["JAX_NUM_PROCESSES"]),
            process_id=int(env["JAX_PROCESS_ID"]),
        )
    jax.distributed.initialize(**kwargs)
    return True


# ---- N processes, one program ------------------------------------------------------------------------------
# Every process runs the same stages on the same seeded host data, so each holds the same host batch; a batch
# becomes a global array by each process filling the shards of its own devices (``global_array``), and device
# results come back to every host with ``fetch``. Files shared by the run are written by the primary process.


def process_count() -> int:
    import jax

    return jax.process_count()


def process_index() -> int:
    import jax

    return jax.process_index()


def is_primary() -> bool:
    """Whether this process writes the run's shared files (metrics, logs, models, predictions, plots)."""
    import jax

    return jax.process_index() == 0


_BARRIERS = itertools.count()
BARRIER_TIMEOUT_ENV = "REWARDSQL_BARRIER_TIMEOUT_S"


def barrier(name: str) -> None:
    """Wait until every process reaches this point (a no-op with one process).

    The wait is a barrier of JAX's coordination service (as JAX's own array serialization waits), not a device
    collective: the other processes may wait for as long as the primary runs a host-only stage (cold_start,
    evaluate), up to ``REWARDSQL_BARRIER_TIMEOUT_S`` seconds (default 6 hours), where a first CPU (gloo)
    collective gives up after 30 s. Every process passes the same barriers in the same order."""
    if process_count() == 1:
        return
    from jax._src import distributed

    client = distributed.global_state.client
    n = next(_BARRIERS)
    if client is None:  # not started by jax.distributed.initialize (e.g. a TPU runtime): a device collective
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
        return
    timeout_s = float(os.environ.get(BARRIER_TIMEOUT_ENV, 6 * 3600))
    client.wait_at_barrier(f"rewardsql_barrier_{n}_{name}", int(timeout_s * 1000))


_GATHERS = itertools.count()


def all_gather_objects(name: str, obj) -> list:
    """Every process's ``obj`` (picklable), in process order, on every process (``[obj]`` with one process).

    Small host values (a step's rewards, counts) travel through JAX's coordination service key-value store, as
    ``barrier`` waits on it; every process makes the same calls in the same order. Each process deletes its key
    once all have read it, so a long run leaves nothing behind."""
    if process_count() == 1:
        return [obj]
    import pickle

    from jax._src import distributed

    client = distributed.global_state.client
    n = next(_GATHERS)
    if client is None:  # not started by jax.distributed.initialize: the pickled bytes through a device collective
        return _gather_by_collective(pickle.dumps(obj))
    timeout_ms = int(float(os.environ.get(BARRIER_TIMEOUT_ENV, 6 * 3600)) * 1000)
    key = f"rewardsql_gather_{n}_{name}"
    client.key_value_set_bytes(f"{key}/{process_index()}", pickle.dumps(obj))
    out = [pickle.loads(client.blocking_key_value_get_bytes(f"{key}/{i}", timeout_ms)) for i in range(process_count())]
    client.wait_at_barrier(f"{key}/read", timeout_ms)
    client.key_value_delete(f"{key}/{process_index()}")
    return out


def _gather_by_collective(payload: bytes) -> list:
    import pickle

    import numpy as np
    from jax.experimental import multihost_utils

    data = np.frombuffer(payload, np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int64))).reshape(-1)
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[: data.size] = data
    every = np.asarray(multihost_utils.process_allgather(buf)).reshape(len(sizes), -1)
    return [pickle.loads(every[i, : sizes[i]].tobytes()) for i in range(len(sizes))]


def owns_row(row: int) -> bool:
    """Whether this process computes the host work of row ``row`` of a batch every process holds (row r on
    process r mod P)."""
    return row % process_count() == process_index()


def gather_rows(name: str, n_rows: int, mine: list) -> list:
    """All ``n_rows`` values of a batch whose row r was computed by process r mod P (``owns_row``): ``mine`` is
    this process's values of its rows in order; every process gets the whole list."""
    if process_count() == 1:
        return list(mine)
    shares = all_gather_objects(name, list(mine))
    p = process_count()
    return [shares[r % p][r // p] for r in range(n_rows)]


def speaker() -> str:
    """Log prefix naming the process that speaks when there are several ("" with one)."""
    import jax

    return f"[process {jax.process_index()}/{jax.process_count()}] " if jax.process_count() > 1 else ""


def global_array(value, sharding):
    """The host array ``value`` (the same on every process) as a jax.Array laid out by ``sharding``: each process
    supplies the shards of its own devices."""
    import jax
    import numpy as np

    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def to_global(tree, shardings):
    """Host (numpy) leaves of ``tree`` as global arrays with the matching ``shardings`` leaf when several processes
    share the mesh; ``tree`` unchanged with one process (jit then places host arrays itself)."""
    if process_count() == 1:
        return tree
    import jax
    import numpy as np

    return jax.tree.map(
        lambda x, s: global_array(x, s) if isinstance(x, (np.ndarray, np.generic)) else x, tree, shardings
    )


def fetch(tree):
    """``tree``'s arrays as host numpy arrays on every process, also arrays whose shards live on other
    processes' devices (gathered across processes)."""
    import jax

    if not spans_processes(tree):
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def spans_processes(tree) -> bool:
    """Whether some array of ``tree`` has shards on another process's devices."""
    import jax

    return process_count() > 1 and any(not getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(tree))
