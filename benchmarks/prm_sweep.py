"""The PRM sweep behind the default's process reward model (issue 31): each point retrains the PRM stage of one
finished run (its SFT policy and its MC step labels, shared by every point) with its own settings and reads the
held-out step AUC the stage reports (the labelled questions split by ``prm.heldout_fraction``, the same split at
every point). One ``launch/run.py stages=prm`` run a point, in sequence (the two cores are the budget), each in its
own run directory under ``--out`` whose ``cold_start``, ``sft`` and ``prm_labels`` link to the base run's; a point
already finished there is read back, not rerun.

    python benchmarks/prm_sweep.py --base runs/a_s0                      # every point
    python benchmarks/prm_sweep.py --base runs/a_s0 --points lr1e-4 steps100

Prints one markdown row a point (and writes the table to ``<out>/sweep.md``): the settings, PRM seconds, final
training loss, held-out step AUC with its 95% interval and balanced accuracy, and whether AUC >= 0.8 is met.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from sft_sweep import sweep

ROOT = Path(__file__).resolve().parents[1]

# name -> overrides of configs/default.py's PRM section (the sweep's axes: lr, steps, label balance, annotations)
POINTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "lr1e-4": ("prm.lr=1e-4",),
    "lr2e-5": ("prm.lr=2e-5",),
    "steps100": ("prm.steps=100",),
    "steps100_balance_none": ("prm.steps=100", "prm.balance=none"),
    "steps200": ("prm.steps=200",),
    "balance_none": ("prm.balance=none",),
    "annotated": ("prm.annotate_results=true",),
}
SHARED_STAGES = ("cold_start", "sft", "prm_labels")


def run_point(name: str, overrides: tuple[str, ...], base: Path, out: Path) -> Path:
    run_dir = out / name
    if not (run_dir / "prm" / "metrics.json").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        for stage in SHARED_STAGES:
            link = run_dir / stage
            if not link.exists():
                link.symlink_to((base / stage).resolve(), target_is_directory=True)
        base_config = json.loads((base / "config.json").read_text())
        cmd = [sys.executable, str(ROOT / "launch" / "run.py"), f"run_dir={run_dir}", f"seed={base_config['seed']}"]
        cmd += ["stages=prm", *overrides]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    return run_dir


def row(name: str, overrides: tuple[str, ...], run_dir: Path) -> str:
    prm = json.loads((run_dir / "prm" / "metrics.json").read_text())
    held = prm["heldout"]
    lo, hi = held["auc_ci95"]
    return (
        f"| {name} | `{' '.join(overrides) or '(configs/default.py)'}` | {prm['seconds']:.0f} "
        f"| {prm['final_loss']:.3f} | {held['auc']:.3f} [{lo:.3f}, {hi:.3f}] | {held['balanced_accuracy']:.3f} "
        f"| {held['steps']} ({held['positives']} positive) | {'yes' if held['auc'] >= 0.8 else 'no'} |"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="a finished run with sft/ and prm_labels/")
    ap.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS))
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "prm_sweep")
    args = ap.parse_args(argv)
    for stage in SHARED_STAGES:
        if not (args.base / stage / "metrics.json").exists():
            raise SystemExit(f"--base {args.base} has no finished {stage} stage; run launch/run.py there first")
    header = [
        f"PRM points on {args.base}'s SFT policy and step labels",
        "",
        "| point | overrides of configs/default.py | PRM s | final loss | held-out step AUC | balanced accuracy "
        "| held-out steps | AUC >= 0.8 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sweep(
        args.points,
        lambda name: row(name, POINTS[name], run_point(name, POINTS[name], args.base, args.out)),
        header,
        args.out,
    )


if __name__ == "__main__":
    main()
