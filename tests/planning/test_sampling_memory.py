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


def test_weights_are_the_real_shards_on_the_host_sampling_mesh(measured):
    assert measured["weights"] == measured["weights_real"]
    assert measured["weights"] < measured["full_weights"] / 4  # fsdp over 8 devices really shards


def test_kv_cache_formula_equals_the_sampler_arrays(measured):
    # prompt cache: 6 prompts padded to 8 rows over 8 devices -> 1 row of 64 slots per device
    assert measured["prompt_cache"] == 1 * 64 * PER_TOKEN
    # generated cache: 8 x 4 = 32 rows of 32 slots, split over the 8 devices from the prefill on
    assert measured["gen_after_prefill"] == measured["gen_after_decode"] == 4 * 32 * PER_TOKEN
    assert measured["cache"] == measured["prompt_cache"] + measured["gen_after_prefill"]


@pytest.mark.parametrize("mesh", ["d2f4", "f8"])
def test_sampler_splits_caches_and_row_state_over_the_batch_axes(measured, mesh):
    """4 prompts (padded to 8) x 4 samples on 8 devices: every device holds 1 prompt row and 4 sample rows of each
    cache and of every per-row array, after the prefill and after the decode loop, on data x fsdp and on fsdp."""
    r = measured["sharded"][mesh]
    assert r["full_cache"] == [32, 2, 16, 16]
    for when in ("prefill", "decode"):
        shapes = r[when]
        assert shapes["prompt_cache"] == [[1, 2, 16, 16]] * 4  # K and V of 2 layers
        assert shapes["cache"] == [[4, 2, 16, 16]] * 4
        assert shapes["prompt_mask"] == [[1, 16]]
        assert shapes["tokens"] == shapes["logprobs"] == [[4, 16]]
        assert shapes["lengths"] == shapes["done"] == [[4]]
    # control: without the mesh in the sampler's options the generated-token cache comes out whole on every device
    assert r["control_cache"] == [r["full_cache"]] * 4


@pytest.mark.parametrize("mesh", ["d2f4", "f8"])
def test_sharded_cache_samples_the_unsharded_tokens(measured, mesh):
    r = measured["sharded"][mesh]
    assert r["same_tokens"]
    assert r["max_logprob_diff"] < 1e-5  # fp32: only the summation order differs


def test_activation_bound_covers_the_compiled_prefill(measured):
    assert measured["activations"] >= measured["prefill_temp"]
    long = measured["long"]  # 16 prompts x 512 tokens: the activations dominate the temporaries
    assert long["temp"] <= long["bound"] <= 4 * long["temp"]
