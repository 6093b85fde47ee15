"""Subprocess worker for test_aot.py: plans a tiny model on 8 simulated CPU devices, prints JSON.

The device count must be fixed before JAX starts its CPU backend, so this runs in its own process.
"""

import json
import math
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax
import numpy as np
from flax import nnx

from rewardsql_jax.models import ModelConfig, build_model, make_mesh, param_shardings
from rewardsql_jax.planning import check_fits, format_plan, plan_memory, planning_devices

CFG = ModelConfig(
    model_type="qwen2",
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    attention_bias=True,
    tie_word_embeddings=False,
)
MESH = (1, 4, 2)


def independent_param_bytes() -> int:
    """Sum of the real parameter shard sizes on one device, from models.param_shardings."""
    abstract = nnx.eval_shape(lambda: build_model(CFG))
    state = nnx.state(abstract, nnx.Param)
    shardings = param_shardings(state, make_mesh(*MESH, devices=jax.devices()[:8]))
    total = 0
    for v, s in zip(jax.tree.leaves(state), jax.tree.leaves(shardings)):
        total += math.prod(s.shard_shape(v.shape)) * np.dtype(v.dtype).itemsize
    full = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in jax.tree.leaves(state))
    return total, full


def uneven_rows_flops() -> dict:
    """Lowered train-step FLOPs of 2 rows (plain layout) and 2 prompt groups (shared prefix) on 4 fsdp devices, which
    the step pads to 4 (``training.padding``), beside the same layouts with 4 real rows: {layout: [uneven, even]}."""
    from rewardsql_jax.planning.aot import GRPO_OPTIONS, lowered_train_flops
    from rewardsql_jax.training.optimizer import OptimizerConfig

    mesh = make_mesh(1, 4, 1, devices=jax.devices()[:4])
    kw = dict(seq=32, loss="grpo", loss_options=GRPO_OPTIONS, compute_dtype="float32", optimizer=OptimizerConfig())
    return {
        name: [
            lowered_train_flops(CFG, mesh, rows=n * group, reference=True, group=group, response=16, **kw)
            for n in (2, 4)
        ]
        for name, group in (("rows", 1), ("groups", 2))
    }


def main():
    plan = plan_memory(
        CFG,
        mesh_shape=MESH,
        prompts=4,
        samples=4,
        prompt_len=16,
        response_len=16,
        micro_batches=1,
        compute_dtype="bfloat16",
        hbm_gb=80.0,
    )
    shard, full = independent_param_bytes()
    tiny = check_fits(plan, hbm_gb=plan.peak_bytes / 2e9)
    try:
        planning_devices(16)
        too_many = ""
    except RuntimeError as e:
        too_many = str(e)
    out = dict(
        param_bytes=plan.param_bytes,
        ref_param_bytes=plan.ref_param_bytes,
        opt_state_bytes=plan.opt_state_bytes,
        independent_param_bytes=shard,
        full_param_bytes=full,
        num_params=plan.num_params,
        train_flops=plan.train_flops,
        six_nt=plan.analytic_flops_6nt,
        full_analytic=plan.analytic_flops_full,
        kv=plan.kv_cache_bytes,
        kv_compiled=plan.kv_cache_bytes_compiled,
        sample_rows=plan.sample_rows,
        train_seq_len=plan.train_seq_len,
        train_temp=plan.train.temp_bytes,
        train_args=plan.train.argument_bytes,
        peak=plan.peak_bytes,
        fits=plan.fits,
        tiny_ok=tiny.ok,
        tiny_message=tiny.message,
        table=format_plan(plan),
        too_many=too_many,
        uneven_rows_flops=uneven_rows_flops(),
    )
    print("PLAN_JSON " + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
