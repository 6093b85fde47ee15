"""Write tests/fixtures/loss_golden.npz: the parity cases' inputs with loss values, gradients and metrics from the
PyTorch references (tests/losses/torch_refs.py), so the parity tier also runs where torch is absent
(tests/losses/test_golden.py).

Usage:  python scripts/make_loss_fixtures.py [--out tests/fixtures/loss_golden.npz]
Needs torch (the `test` extra). Rerun after adding a case to tests/losses/loss_cases.py.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "losses"))

from loss_cases import make_cases
from torch_refs import run_torch


def build() -> dict[str, np.ndarray]:
    """Run every case through the torch reference; flatten into npz keys '<i>/in/<k>', '<i>/loss', ..."""
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for i, case in enumerate(make_cases()):
        loss, grads, metrics = run_torch(case["loss"], case["inputs"], case["kwargs"])
        for k, v in case["inputs"].items():
            arrays[f"{i}/in/{k}"] = np.asarray(v)
        arrays[f"{i}/loss"] = np.asarray(loss, np.float32)
        for k, v in grads.items():
            arrays[f"{i}/grad/{k}"] = np.asarray(v, np.float32)
        for k, v in metrics.items():
            arrays[f"{i}/metric/{k}"] = np.asarray(v, np.float32)
        meta.append({"name": case["name"], "loss": case["loss"], "kwargs": case["kwargs"]})
    arrays["meta"] = np.array(json.dumps(meta))
    return arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "loss_golden.npz"))
    out = pathlib.Path(parser.parse_args().out)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = build()
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({out.stat().st_size / 1024:.1f} KiB, {len(json.loads(str(arrays['meta'])))} cases)")


if __name__ == "__main__":
    main()
