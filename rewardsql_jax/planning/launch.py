"""``launch/run.py --config ... plan=true``: plan the run's RL step instead of running the pipeline.

Options ride on the override list: ``plan=true`` turns planning on, ``plan.devices=8`` gives the device
count (needed when a mesh axis is -1; default 8), ``plan.hbm=v5p`` (or GB) the per-device memory to check,
``plan.compile_layers=4`` compiles 3 and 4 layers and extrapolates, ``plan.out=path`` saves the table,
``plan.local_devices=4`` the devices of one host (default: 4 for a TPU ``plan.hbm``, 8 for a GPU one, else
``min(devices, 8)``), over which the sampling stages' models are sharded.
Call ``split_plan_overrides`` before ``apply_overrides`` and ``run_plan`` before any JAX operation, so the
simulated CPU device count can still be set.
"""

from __future__ import annotations

import math

_TRUE = ("true", "1", "yes", "on")


def split_plan_overrides(overrides) -> tuple[dict | None, list]:
    """(plan options or None when ``plan`` is not true, the remaining ``key=value`` overrides)."""
    opts, rest = {}, []
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "plan" or key.startswith("plan."):
            opts[key[len("plan.") :] if key != "plan" else "plan"] = value
        else:
            rest.append(item)
    if opts.get("plan", "false").lower() not in _TRUE:
        if set(opts) - {"plan"}:
            raise ValueError(f"plan.* options {sorted(set(opts) - {'plan'})} need plan=true")
        return None, rest
    unknown = set(opts) - {"plan", "devices", "hbm", "compile_layers", "out", "local_devices"}
    if unknown:
        raise ValueError(
            f"unknown plan option(s) {sorted(unknown)}; use plan.devices, plan.hbm, plan.compile_layers, "
            f"plan.local_devices, plan.out"
        )
    return opts, rest


def plan_devices(run_config, options: dict) -> int:
    """The simulated device count of a plan (``plan.devices``, else the mesh's product, 8 when an axis is -1),
    set on the CPU backend before it starts (harmless on accelerator hosts)."""
    import jax

    m = run_config.mesh
    sizes = (m.data, m.fsdp, m.tensor)
    n = int(options.get("devices") or (8 if -1 in sizes else math.prod(sizes)))
    try:  # before the backend starts; harmless on accelerator hosts
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        pass
    return n


def plan_hbm_gb(options: dict) -> float | None:
    """``plan.hbm`` in GB (a number or a name of ``HBM_GB``), None when not given."""
    from .report import HBM_GB

    hbm = options.get("hbm")
    return None if not hbm else HBM_GB.get(hbm.lower()) or float(hbm)


def plan_local_devices(options: dict, devices: int) -> int:
    """Devices of one host: ``plan.local_devices``, else by ``plan.hbm`` (``LOCAL_DEVICES``), else min(devices, 8)."""
    from .report import LOCAL_DEVICES

    given = options.get("local_devices")
    n = int(given) if given else LOCAL_DEVICES.get(str(options.get("hbm", "")).lower(), min(devices, 8))
    if n < 1 or devices % n:
        raise ValueError(f"plan.local_devices={n} must divide the {devices} devices of the plan")
    return n


def run_plan(run_config, options: dict):
    """Plan ``run_config``'s RL step on simulated devices, print the table (and the OOM check), return the Plan."""
    from .from_run import plan_from_run_config
    from .report import check_fits, format_plan

    n = plan_devices(run_config, options)
    hbm_gb = plan_hbm_gb(options)
    layers = options.get("compile_layers")
    plan = plan_from_run_config(run_config, devices=n, hbm_gb=hbm_gb, compile_layers=int(layers) if layers else None)
    text = format_plan(plan) + ("\n" + check_fits(plan).message if hbm_gb else "")
    print(text)
    if options.get("out"):
        with open(options["out"], "w") as fh:
            fh.write(text + "\n")
    return plan
