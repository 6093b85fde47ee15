"""The analytic per-device counts of the sampling models (``planning.sampling_memory``) against a small model's
real arrays on an 8-device fsdp local mesh (subprocess: the device count is fixed before JAX starts)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("sampling_memory_worker.py")
# 2 (K, V) x 2 layers x 2 kv heads x 16 head dim x 2 bytes (bf16) per cached token
PER_TOKEN = 2 * 2 * 2 * 16 * 2


@pytest.fixture(scope="module")
def measured():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("SAMPLING_JSON "))
    return json.loads(line[len("SAMPLING_JSON ") :])


def test_weights_are_the_real_shards_on_the_local_mesh(measured):
    assert measured["weights"] == measured["weights_real"]
    assert measured["weights"] < measured["full_weights"] / 4  # fsdp over 8 devices really shards


def test_kv_cache_formula_equals_the_sampler_arrays(measured):
    # prompt cache: 6 prompts padded to 8 rows over 8 devices -> 1 row of 64 slots per device
    assert measured["prompt_cache"] == 1 * 64 * PER_TOKEN
    # generated cache: 8 x 4 = 32 rows of 32 slots; prefill returns it replicated, the decode loop shards it
    assert measured["gen_after_prefill"] == 32 * 32 * PER_TOKEN
    assert measured["gen_after_decode"] == 4 * 32 * PER_TOKEN
    assert measured["cache"] == measured["prompt_cache"] + measured["gen_after_prefill"] + measured["gen_after_decode"]


def test_activation_bound_covers_the_compiled_prefill(measured):
    assert measured["activations"] >= measured["prefill_temp"]
    long = measured["long"]  # 16 prompts x 512 tokens: the activations dominate the temporaries
    assert long["temp"] <= long["bound"] <= 4 * long["temp"]
