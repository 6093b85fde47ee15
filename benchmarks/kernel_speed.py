"""Attention kernels vs the jnp reference on the current backend.

    python benchmarks/kernel_speed.py [--iters 20] [--dtype bfloat16] [--small] [--append-results] [--interpret]

For each shape: flash attention forward, forward+backward, and decode attention over a KV cache,
timed (median of ``--iters`` jitted calls after a warm-up) for the Pallas kernel (Triton on GPU,
Mosaic on TPU) and the reference, with the speedup, achieved TFLOP/s (flash) or GB/s of K/V read
(decode, the HBM-roofline number), and the max relative difference kernel vs reference (the compiled
kernels are checked here; the CI tests only run them in interpret mode). On CPU only the reference
runs (Pallas has no compiled CPU lowering) and small shapes are used.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewardsql_jax.kernels.dispatch import attention_impl
from rewardsql_jax.kernels.reference import decode_attention_reference, mha_reference

# (B, T, H, Hkv, D): Qwen2.5-0.5B-like and Qwen2.5-7B-like attention layouts.
FLASH_SHAPES = [(8, 1024, 14, 2, 64), (4, 2048, 28, 4, 128), (1, 8192, 28, 4, 128)]
# (B, S_max, H, Hkv, D)
DECODE_SHAPES = [(64, 2048, 14, 2, 64), (32, 4096, 28, 4, 128), (8, 8192, 28, 4, 128)]
SMALL_FLASH = [(2, 256, 4, 2, 64)]
SMALL_DECODE = [(8, 512, 4, 2, 64)]


def timed(fn, args, iters):
    """Median seconds of ``fn(*args)`` (already jitted) after one warm-up call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def max_diff(a, b):
    """Largest ``max|x - y| / max|y|`` over the leaves (outputs, gradients) of kernel vs reference."""
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b))
    return max(
        float(jnp.max(jnp.abs(x.astype(jnp.float32) - y.astype(jnp.float32))) / jnp.max(jnp.abs(y.astype(jnp.float32))))
        for x, y in leaves
    )


def flash_rows(shape, dtype, impl, iters):
    b, t, h, hkv, d = shape
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q = jax.random.normal(keys[0], (b, t, h, d), dtype)
    k = jax.random.normal(keys[1], (b, t, hkv, d), dtype)
    v = jax.random.normal(keys[2], (b, t, hkv, d), dtype)
    lengths = jax.random.randint(keys[3], (b,), t // 2, t + 1)
    fwd_flops = 4 * b * h * t * t * d * 0.5  # causal: half the score matrix

    def fwd(fn):
        return jax.jit(lambda q, k, v: fn(q, k, v, causal=True, kv_lengths=lengths))

    def fwd_bwd(fn):
        def loss(q, k, v):
            return jnp.sum(fn(q, k, v, causal=True, kv_lengths=lengths).astype(jnp.float32))

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))

    rows = []
    for label, make, flops in (("flash fwd", fwd, fwd_flops), ("flash fwd+bwd", fwd_bwd, 3.5 * fwd_flops)):
        ref_fn = make(mha_reference)
        ref_t = timed(ref_fn, (q, k, v), iters)
        row = dict(op=label, shape=shape, ref_ms=ref_t * 1e3, ref_rate=flops / ref_t / 1e12, unit="TFLOP/s")
        if impl is not None:
            ker_fn = make(impl.flash)
            row.update(ker_ms=timed(ker_fn, (q, k, v), iters) * 1e3)
            row.update(ker_rate=flops / (row["ker_ms"] / 1e3) / 1e12, diff=max_diff(ker_fn(q, k, v), ref_fn(q, k, v)))
        rows.append(row)
    return rows


def decode_rows(shape, dtype, impl, iters):
    b, s, h, hkv, d = shape
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    q = jax.random.normal(keys[0], (b, h, d), dtype)
    kc = jax.random.normal(keys[1], (b, s, hkv, d), dtype)
    vc = jax.random.normal(keys[2], (b, s, hkv, d), dtype)
    lengths = jax.random.randint(keys[3], (b,), s // 4, s + 1)
    # Bytes a length-aware kernel must read: the valid K and V slots.
    gbytes = 2 * int(jnp.sum(lengths)) * hkv * d * jnp.dtype(dtype).itemsize / 1e9
    ref_fn = jax.jit(lambda q, k, v: decode_attention_reference(q, k, v, lengths=lengths))
    ref_t = timed(ref_fn, (q, kc, vc), iters)
    row = dict(op="decode", shape=shape, ref_ms=ref_t * 1e3, ref_rate=gbytes / ref_t, unit="GB/s")
    if impl is not None:
        ker_fn = jax.jit(lambda q, k, v: impl.decode(q, k, v, lengths=lengths))
        ker_t = timed(ker_fn, (q, kc, vc), iters)
        row.update(ker_ms=ker_t * 1e3, ker_rate=gbytes / ker_t, diff=max_diff(ker_fn(q, kc, vc), ref_fn(q, kc, vc)))
    return [row]


def table(rows) -> str:
    lines = [
        "| op | shape (B,T/S,H,Hkv,D) | reference ms | kernel ms | speedup | reference rate | kernel rate | max rel diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ker = r.get("ker_ms")
        lines.append(
            f"| {r['op']} | {r['shape']} | {r['ref_ms']:.3f} | "
            + (f"{ker:.3f} | {r['ref_ms'] / ker:.2f}x | " if ker else "skipped | - | ")
            + f"{r['ref_rate']:.2f} {r['unit']} | "
            + (f"{r['ker_rate']:.2f} {r['unit']} | {r['diff']:.2e} |" if ker else "- | - |")
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on accelerators, float32 on CPU")
    parser.add_argument("--small", action="store_true", help="CPU-sized shapes on any backend")
    parser.add_argument("--append-results", action="store_true", help="append the table to benchmarks/RESULTS.md")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="smoke-run the Pallas kernels in interpret mode (small shapes; times meaningless)",
    )
    args = parser.parse_args()

    backend = jax.default_backend()
    on_cpu = backend == "cpu"
    dtype = jnp.dtype(args.dtype or ("float32" if on_cpu else "bfloat16"))
    if args.interpret:
        impl = attention_impl(interpret=True, block_q=64, block_k=64)
    elif on_cpu:
        impl = None
        print("Pallas kernels skipped on cpu (no compiled Pallas lowering; tests run them in interpret mode).")
    else:
        impl = attention_impl(backend)
    small = args.small or on_cpu or args.interpret
    rows = []
    for shape in SMALL_FLASH if small else FLASH_SHAPES:
        rows += flash_rows(shape, dtype, impl, args.iters)
    for shape in SMALL_DECODE if small else DECODE_SHAPES:
        rows += decode_rows(shape, dtype, impl, args.iters)

    device = jax.devices()[0].device_kind
    header = (
        f"### Attention kernels ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {device}, "
        f"{platform.node()}, {dtype.name}, kernel={impl.name if impl else 'none'})\n\n"
        f"Command: `python benchmarks/kernel_speed.py {' '.join(sys.argv[1:])}`\n"
    )
    text = header + "\n" + table(rows) + "\n"
    print(text)
    if args.append_results:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
