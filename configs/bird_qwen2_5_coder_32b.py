"""Reward-SQL on BIRD with Qwen2.5-Coder-32B-Instruct: the 7B config's hyper-parameters on a 64-chip slice.

    python launch/run.py --config configs/bird_qwen2_5_coder_32b.py \
        data.root=/data/bird model.path=/ckpt/Qwen2.5-Coder-32B-Instruct

Memory (docs/memory.md, "Memory of a whole stage"): 2048-token prompts, a data=1 x fsdp=8 x tensor=8 mesh with 48
micro-batches (the AOT plan puts the GRPO train step at 73.5 GB per device of 95, v5p; with the PRM scorer's
16.4 GB beside it the RL stage is at 89.8 GB, 95%: tight). The sampling stages load their models over one host's
4 chips: Best-of-32, the paper's N, needs 56.3 GB per device (policy + PRM 32.8 GB, KV cache of 8 prompts x 32
samples 18.3 GB split over the rows, prefill 5.3 GB).
Check before launching:
    python launch/run.py --config configs/bird_qwen2_5_coder_32b.py plan=true plan.devices=64 plan.hbm=v5p \
        plan.compile_layers=2
"""

import dataclasses
from pathlib import Path

from rewardsql_jax.config import load_config
from rewardsql_jax.stages.run_config import InferenceConfig, MeshConfig, ModelConfigSection

_7B = load_config(Path(__file__).with_name("bird_qwen2_5_coder_7b.py"))

CONFIG = dataclasses.replace(
    _7B,
    name="bird_qwen2_5_coder_32b",
    run_dir="runs/bird_qwen2_5_coder_32b",
    mesh=MeshConfig(data=1, fsdp=8, tensor=8, micro_batches=48),
    # remat: the PRM step needs 98.1 GB per device without (docs/memory.md, "Memory of a whole stage"), 91.5 GB with
    model=ModelConfigSection(path="/ckpt/Qwen2.5-Coder-32B-Instruct", max_len=2048 + 512, dtype="bfloat16", remat=True),
    # SFT and PRM in micro-batches of 8 rows as the RL step (384 rows / 48), one row per data x fsdp device (the
    # floor: fewer rows are padded to 8)
    sft=dataclasses.replace(_7B.sft, micro_batches=2),
    prm=dataclasses.replace(_7B.prm, micro_batches=2),
    rl=dataclasses.replace(_7B.rl, prompts_per_sampler_call=24),
    inference=InferenceConfig(best_of_n=32, temperature=1.0, aggregation="min", max_new_tokens=1024),
)
