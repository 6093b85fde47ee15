"""The SFT sweep behind the default's policy (issue 31): each point trains the default's SFT stage with its own
settings and measures the ``headroom`` block on held-out questions (greedy EX, pass@1 and pass@N of N samples at
the default's temperature), without a PRM or RL. One ``launch/run.py`` run a point, in sequence (the two cores
are the budget), each in its own run directory under ``--out``; a point already finished there is read back, not
rerun.

    python benchmarks/sft_sweep.py                         # every point, 100 held-out questions, seed 0
    python benchmarks/sft_sweep.py --points raw40 chat40 --max-eval 200 --seed 1

Prints one markdown row a point (and writes the table to ``<out>/sweep.md``): the settings, SFT seconds, greedy EX
with its 95% interval, pass@1 / pass@N, pass@N - greedy, the executable rate of the samples and whether the
headroom target (greedy in [20, 60], pass@N >= greedy + 10) is met.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> overrides of configs/default.py (the sweep's axes: prompt format, steps, lr, held-out schema names)
POINTS: dict[str, tuple[str, ...]] = {
    "raw40": ("sft.steps=40", "sft.lr=1e-4"),
    "raw40_lr3e-5": ("sft.steps=40", "sft.lr=3e-5"),
    "raw80": ("sft.steps=80", "sft.lr=1e-4"),
    "chat40": ("data.chat_template=true", "sft.steps=40", "sft.lr=1e-4"),
    "chat40_lr3e-5": ("data.chat_template=true", "sft.steps=40", "sft.lr=3e-5"),
    "raw40_same_names": ("data.rename_test_schemas=false", "sft.steps=40", "sft.lr=1e-4"),
    "chat40_same_names": ("data.rename_test_schemas=false", "data.chat_template=true", "sft.steps=40", "sft.lr=1e-4"),
}
STAGES = "cold_start,sft,inference,evaluate"


def run_point(name: str, overrides: tuple[str, ...], out: Path, seed: int, max_eval: int) -> Path:
    run_dir = out / f"{name}_s{seed}_e{max_eval}"
    if not (run_dir / "evaluate" / "metrics.json").exists():
        cmd = [sys.executable, str(ROOT / "launch" / "run.py"), f"run_dir={run_dir}", f"seed={seed}"]
        cmd += [f"data.max_eval={max_eval}", f"stages={STAGES}", *overrides]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    return run_dir


def row(name: str, overrides: tuple[str, ...], run_dir: Path) -> str:
    def metrics(stage):
        return json.loads((run_dir / stage / "metrics.json").read_text())

    sft, inference, head = metrics("sft"), metrics("inference"), metrics("evaluate")["headroom"]
    n = head["n"]
    greedy, lo_hi = head["greedy"]["ex"], head["greedy"]["ci95"]
    gap = head["pass_at_n_minus_greedy"]
    return (
        f"| {name} | `{' '.join(overrides)}` | {sft['seconds']:.0f} | {greedy:.1f} [{lo_hi[0]:.1f}, {lo_hi[1]:.1f}] "
        f"| {head['pass@1']['ex']:.1f} / {head[f'pass@{n}']['ex']:.1f} | {gap['delta']:+.1f} "
        f"[{gap['ci95'][0]:+.1f}, {gap['ci95'][1]:+.1f}] | {inference['executable_candidate_rate']:.2f} "
        f"| {'yes' if head['target']['met'] else 'no'} |"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-eval", type=int, default=100, help="held-out questions a point (seeded subset)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "sft_sweep")
    args = ap.parse_args(argv)
    header = [
        f"seed {args.seed}, {args.max_eval} held-out questions; EX in points",
        "",
        "| point | overrides of configs/default.py | SFT s | greedy EX | pass@1 / pass@N | pass@N - greedy "
        "| executable samples | headroom met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sweep(
        args.points,
        lambda name: row(name, POINTS[name], run_point(name, POINTS[name], args.out, args.seed, args.max_eval)),
        header,
        args.out,
    )


def sweep(points, point_row, header: list[str], out: Path) -> None:
    """Run the ``points`` in sequence (``point_row(name)`` runs one and returns its markdown row), printing each
    row as it lands, then the table under ``header``, also written to ``<out>/sweep.md``."""
    rows = []
    for name in points:
        rows.append(point_row(name))
        print(rows[-1], flush=True)
    table = "\n".join(header + rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
