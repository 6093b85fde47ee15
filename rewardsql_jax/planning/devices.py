"""Simulated CPU devices for AOT planning: a mesh of N host devices stands in for N accelerators.

XLA fixes the number of CPU devices when the backend starts, so the count must be chosen before the
first JAX operation of the process (``python -m rewardsql_jax.planning`` does that for you).
"""

from __future__ import annotations

import os

import jax

HOW_TO = (
    "start a fresh process with XLA_FLAGS=--xla_force_host_platform_device_count={n} set before jax is "
    "imported (or call jax.config.update('jax_num_cpu_devices', {n}) right after `import jax`), "
    "or run `python -m rewardsql_jax.planning ...`, which does it itself"
)


def planning_devices(n: int, devices=None) -> list:
    """``n`` devices to compile for: the given ones, else the default backend's when it has ``n`` or more
    (real accelerators give the most faithful memory numbers), else ``n`` simulated CPU devices.

    Raises RuntimeError with the fix when this process already started a CPU backend with fewer devices.
    """
    if devices is not None:
        devices = list(devices)
        if len(devices) < n:
            raise ValueError(f"the mesh needs {n} devices but {len(devices)} were given")
        return devices[:n]
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        try:  # only succeeds before the first JAX operation of the process
            jax.config.update("jax_num_cpu_devices", max(n, jax.config.values["jax_num_cpu_devices"]))
        except RuntimeError:
            pass
    default = jax.devices()
    if len(default) >= n:
        return default[:n]
    cpu = jax.devices("cpu")
    if len(cpu) >= n:
        return cpu[:n]
    raise RuntimeError(
        f"planning a {n}-device mesh needs {n} devices, but this process has {len(cpu)} CPU "
        f"device(s) and its backend is already running; " + HOW_TO.format(n=n)
    )
