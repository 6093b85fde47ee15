"""AOT planning on 8 simulated CPU devices (subprocess): shard bytes, FLOPs, KV cache, OOM message."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("plan_worker.py")


@pytest.fixture(scope="module")
def plan():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PLAN_JSON "))
    return json.loads(line[len("PLAN_JSON ") :])


def test_param_bytes_equal_real_shard_sizes(plan):
    assert plan["param_bytes"] == plan["independent_param_bytes"]
    # fsdp=4 x tensor=2 really shards: one device holds well under the full model
    assert plan["param_bytes"] < plan["full_param_bytes"] / 4
    # reference copy has the same layout; AdamW keeps two fp32 moments per parameter (+ scalar counts)
    assert plan["ref_param_bytes"] == plan["param_bytes"]
    assert 2 * plan["param_bytes"] <= plan["opt_state_bytes"] <= 2 * plan["param_bytes"] + 64


def test_train_flops_near_6nt(plan):
    assert plan["train_flops"] > 0
    assert 0.5 <= plan["train_flops"] / plan["six_nt"] <= 2.0
    assert 0.5 <= plan["train_flops"] / plan["full_analytic"] <= 2.0
    # 6 N T by hand: N without the input embedding (untied); shared prefix: T = 4 prompts x 16 prompt tokens
    # (each computed once) + 16 rows x 16 response tokens, over 8 devices
    n = plan["num_params"] - 256 * 64
    assert plan["six_nt"] == pytest.approx(6 * n * (4 * 16 + 16 * 16) / 8)
    assert "each computed once, shared prefix" in plan["table"]


def test_analytic_flops_of_the_two_layouts():
    from rewardsql_jax.models.config import ModelConfig
    from rewardsql_jax.planning.aot import analytic_train_flops

    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    n = 10_000
    six, full = analytic_train_flops(cfg, n, rows=32, seq=600, reference=True)
    assert six == 6 * n * 32 * 600
    assert full == six + 2 * n * 32 * 600 + 4 * 4 * 2 * 32 * 600 * 600 * 4 * 16
    six_g, full_g = analytic_train_flops(cfg, n, rows=32, seq=600, reference=True, group=8, response=100)
    tokens = 4 * 500 + 32 * 100
    assert six_g == 6 * n * tokens
    assert full_g == six_g + 2 * n * tokens + 4 * 4 * 2 * (4 * 500 * 500 + 32 * 100 * 600) * 4 * 16


def test_kv_cache_bytes_match_formula(plan):
    # 2 (K, V) x 1 layer x ([4 prompts / (data*fsdp=4), 16 prompt slots] + [16 rows / 4, 16 generated slots])
    # x [2 kv heads / tensor=2, 16] x bf16: the prompt cache holds each prompt once
    expected = 2 * 1 * ((4 // 4) * 16 + (16 // 4) * 16) * (2 // 2) * 16 * 2
    assert plan["sample_rows"] == 16
    assert plan["kv"] == expected
    assert plan["kv_compiled"] == expected  # the compiled prefill splits both caches over the rows as counted


def test_train_flops_of_rows_that_do_not_split_over_the_devices(plan):
    """``plan=true`` of 2 prompts on 4 devices (the smoke config with ``plan.devices=4``): the FLOPs are those of
    the step the run executes, padded to 4 rows (``training.padding``), not an indivisible-sharding error."""
    for layout, (uneven, even) in plan["uneven_rows_flops"].items():
        assert 0 < uneven <= even, layout  # the losses see the real rows only
        assert uneven > 0.95 * even, layout  # the model's forward and backward run on the 4 padded rows


def test_memory_analysis_is_reported(plan):
    assert plan["train_args"] >= 3 * plan["param_bytes"]  # params + reference + moments are arguments
    assert plan["train_temp"] > 0
    assert plan["peak"] > plan["train_args"] - 1
    assert plan["fits"] is True
    assert "FITS" in plan["table"] and "KV cache" in plan["table"]


def test_too_small_hbm_gives_oom_message(plan):
    assert plan["tiny_ok"] is False
    assert "will OOM" in plan["tiny_message"] and "To fit:" in plan["tiny_message"]


def test_too_few_devices_fails_with_instructions(plan):
    assert "xla_force_host_platform_device_count=16" in plan["too_many"]
    assert "python -m rewardsql_jax.planning" in plan["too_many"]
