"""SQLConductor's trainers on a mesh: SFT sharded over 2 simulated CPU devices with 2 micro-batches equals one
device and one batch (fp32 summation order only), and the policy server samples from the sharded model.
Runs tests/conductor/mesh_worker.py in a subprocess (XLA_FLAGS must precede the jax import)."""

import json
import os
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).parent / "mesh_worker.py"


def test_sft_on_a_two_device_mesh_with_micro_batches_equals_one_device():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 2 and report["mesh"] == {"data": 1, "fsdp": 2, "tensor": 1}
    assert report["sharded"] and report["max_param_diff"] < 2e-5
    assert report["same_greedy"]
