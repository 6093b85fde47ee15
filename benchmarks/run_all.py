"""Run every benchmark script in benchmarks/ and append their output to benchmarks/RESULTS.md.

    python benchmarks/run_all.py            # full benchmarks
    python benchmarks/run_all.py --quick    # each script's quick setting
    python benchmarks/run_all.py --only grpo_vs_trl sampler

Each script runs in its own process (so each can set XLA flags before JAX starts); its stdout/stderr tail,
exit code and wall time go under one dated heading together with the machine description (CPU model, cores,
RAM, accelerator, jax / torch versions). A failing script is recorded and the others still run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
ORDER = ("sampler", "train_step", "grpo_vs_trl", "sql", "sql_clause_rewards", "kernel_speed", "cocte_conversion")
# Scripts without a --quick flag get these arguments under --quick instead.
QUICK_ARGS = {
    "sql": ["--passes", "1"],
    "sql_clause_rewards": ["--limit", "200"],
    "kernel_speed": ["--small", "--iters", "5"],
    "cocte_conversion": ["--limit", "200"],
}
SKIP = {"run_all"}


def scripts(only=None) -> list[Path]:
    """Benchmark scripts present in benchmarks/, in ORDER first, then any others alphabetically."""
    found = {p.stem: p for p in HERE.glob("*.py") if p.stem not in SKIP and not p.stem.startswith("_")}
    names = [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)
    if only:
        unknown = [n for n in only if n not in found]
        if unknown:
            raise SystemExit(f"unknown benchmark(s) {unknown}; present: {sorted(found)}")
        names = [n for n in names if n in only]
    return [found[n] for n in names]


def quick_args(path: Path) -> list[str]:
    if "--quick" in path.read_text(encoding="utf-8"):
        return ["--quick"]
    return QUICK_ARGS.get(path.stem, [])


def machine() -> str:
    """CPU model, cores, RAM, accelerator and library versions of this machine."""
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    ram = "?"
    try:
        kb = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal"))
        ram = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        pass
    probe = "import jax; d = jax.devices(); print(jax.__version__, jax.default_backend(), len(d), d[0].device_kind)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.split()
    jax_desc = f"jax {out[0]} ({out[1]}, {out[2]} x {' '.join(out[3:])})" if len(out) >= 4 else "jax ?"
    try:
        import torch

        torch_desc = f"torch {torch.__version__}"
    except ImportError:
        torch_desc = "torch not installed"
    return f"{cpu}; {os.cpu_count()} cores; RAM {ram}; {jax_desc}; {torch_desc}; Python {platform.python_version()}"


def run_one(path: Path, extra: list[str], timeout: float) -> tuple[int, float, str]:
    """(exit code, seconds, combined output) of one script."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(path), *extra], capture_output=True, text=True, timeout=timeout, cwd=HERE.parent
        )
        code, out = (
            proc.returncode,
            proc.stdout + (("\n[stderr tail]\n" + proc.stderr[-3000:]) if proc.returncode else ""),
        )
    except subprocess.TimeoutExpired as e:
        code, out = -1, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\n[timed out after {timeout:.0f} s]"
    return code, time.perf_counter() - t0, out.rstrip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass each script its quick setting")
    ap.add_argument("--only", nargs="*", help="benchmark names (file stems) to run")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per script")
    ap.add_argument("--no-append", action="store_true", help="print only, do not touch RESULTS.md")
    args = ap.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = [f"\n## {stamp}{' (--quick)' if args.quick else ''}\n", f"Machine: {machine()}\n"]
    failures = 0
    for path in scripts(args.only):
        extra = quick_args(path) if args.quick else []
        cmd = " ".join(["python", f"benchmarks/{path.name}", *extra])
        print(f"== {cmd}", flush=True)
        code, seconds, out = run_one(path, extra, args.timeout)
        print(out, flush=True)
        failures += code != 0
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        section += [f"### {path.stem}\n", f"`{cmd}` — {status}, {seconds:.0f} s\n", "```", out, "```\n"]
    if not args.no_append:
        if not RESULTS.exists():
            RESULTS.write_text("# Benchmark results\n\nAppended by `python benchmarks/run_all.py`.\n", encoding="utf-8")
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(section) + "\n")
        print(f"appended to {RESULTS}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
