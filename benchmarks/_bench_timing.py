"""Side-by-side timing for the benchmarks that run ours against a reference in one process: the machine line,
warm-up then alternating timed calls (a load that comes and goes falls on both sides), medians and ratios."""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import time

import jax
import torch
import transformers


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, load average {load}; jax {jax.__version__} "
        f"({jax.default_backend()}), torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}"
    )


def timed(fn):
    """(wall seconds, process CPU seconds, result) of one call."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


@dataclasses.dataclass(frozen=True)
class Timing:
    wall: float  # median seconds of the timed calls
    cpu: float  # median process CPU seconds
    first: float  # the warm-up call (ours: includes compiling)


def alternate(fns: dict, iters: int, warm: dict | None = None) -> tuple[dict, dict, dict]:
    """Warm each of ``fns`` (name -> no-argument function) once (with ``warm[name]`` instead when given), then run
    them ``iters`` times in turn: ({name: Timing}, {name: warm-up result}, {name: last timed result})."""
    warm = warm or {}
    first, warm_out, last = {}, {}, {}
    for name, fn in fns.items():
        first[name], _, warm_out[name] = timed(warm.get(name, fn))
    runs = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            wall, cpu, last[name] = timed(fn)
            runs[name].append((wall, cpu))
    times = {}
    for name, r in runs.items():
        walls, cpus = zip(*r)
        times[name] = Timing(statistics.median(walls), statistics.median(cpus), first[name])
    return times, warm_out, last


def compile_s(t: Timing) -> float:
    return max(t.first - t.wall, 0.0)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 and a == a and b == b else "-"
