"""``python -m rewardsql_jax.planning``: print (and save) an AOT memory / FLOPs plan.

    python -m rewardsql_jax.planning --model qwen2.5-coder-7b --mesh 1,8,1 --micro-batches 48 --hbm v5p
    python -m rewardsql_jax.planning --run-config configs/bird_qwen2_5_coder_7b.py --devices 8 --hbm h100

The device count is fixed before JAX starts its CPU backend, so this entry point can simulate the mesh.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python -m rewardsql_jax.planning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="architecture preset (qwen2.5-coder-7b, qwen2.5-coder-32b)")
    src.add_argument("--config-json", help="a HF config.json (or its folder)")
    src.add_argument("--run-config", help="a pipeline config file (configs/*.py); plans its RL stage")
    p.add_argument("overrides", nargs="*", help="key=value overrides of --run-config")
    p.add_argument("--mesh", default="1,-1,1", help="data,fsdp,tensor (one may be -1 with --devices)")
    p.add_argument("--devices", type=int, default=None, help="device count (needed when a mesh axis is -1)")
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--sample-prompts", type=int, default=None, help="prompts per sampler call (default: --prompts)")
    p.add_argument("--prompt-len", type=int, default=8192)
    p.add_argument("--response-len", type=int, default=512)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--compute-dtype", default="bfloat16")
    p.add_argument("--hbm", default=None, help="per-device memory: GB or a name (v5p, h100, h200, a100, v4, v5e)")
    p.add_argument(
        "--compile-layers",
        type=int,
        default=None,
        help="K: compile K-1 and K layers and extrapolate (for very large models on a small host; K >= 3 advised)",
    )
    p.add_argument(
        "--no-shared-prefix",
        action="store_true",
        help="plan prompts x samples independent rows instead of the RL stage's shared-prefix groups",
    )
    p.add_argument("--out", default=None, help="also write the table to this file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    mesh = tuple(int(x) for x in args.mesh.split(","))
    n = args.devices if args.devices else math.prod(mesh)
    if n < 1 or (-1 in mesh and not args.devices):
        print("a mesh axis of -1 needs --devices N", file=sys.stderr)
        return 2
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n}").strip()
    import jax  # after the device count is set

    jax.config.update("jax_num_cpu_devices", n)
    from .aot import plan_memory
    from .report import HBM_GB, check_fits, format_plan

    hbm = None if args.hbm is None else HBM_GB.get(args.hbm.lower()) or float(args.hbm)
    if args.run_config:
        from rewardsql_jax.config import apply_overrides, load_config

        from .from_run import plan_from_run_config

        cfg = apply_overrides(load_config(args.run_config), args.overrides)
        if args.mesh != "1,-1,1":
            d, f, t = mesh
            cfg = dataclasses.replace(cfg, mesh=dataclasses.replace(cfg.mesh, data=d, fsdp=f, tensor=t))
        plan = plan_from_run_config(cfg, devices=n, hbm_gb=hbm, compile_layers=args.compile_layers)
    else:
        from rewardsql_jax.models.presets import preset_config
        from rewardsql_jax.models.registry import config_from_json

        model = preset_config(args.model) if args.model else config_from_json(args.config_json)
        plan = plan_memory(
            model,
            mesh_shape=mesh,
            devices=n,
            prompts=args.prompts,
            samples=args.samples,
            prompt_len=args.prompt_len,
            response_len=args.response_len,
            micro_batches=args.micro_batches,
            compute_dtype=args.compute_dtype,
            sample_prompts=args.sample_prompts,
            hbm_gb=hbm,
            compile_layers=args.compile_layers,
            name=args.model or None,
            shared_prefix=not args.no_shared_prefix,
        )
    text = format_plan(plan)
    if hbm is not None:
        text += "\n" + check_fits(plan).message
    print(text)
    if args.out:
        command = "python -m rewardsql_jax.planning " + " ".join(sys.argv[1:] if argv is None else argv)
        with open(args.out, "w") as fh:
            fh.write(f"$ {command}\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
