"""Reward-SQL on BIRD with Qwen2.5-Coder-7B-Instruct, the paper's hyper-parameters (DESIGN.md).

Download BIRD (train + dev with databases) and the HF checkpoint first, then e.g. on a v5p-8 / 8xH100:

    python launch/run.py --config configs/bird_qwen2_5_coder_7b.py \
        data.root=/data/bird model.path=/ckpt/Qwen2.5-Coder-7B-Instruct

SFT lr 1e-5, 3 epochs, batch 16; PRM the same; GRPO lr 1e-6 constant, 48 prompts x 8 samples,
clip 0.2, KL (k3) 0.001, entropy 0.001, T=1.0, 512 new tokens; PRM labels k=16, c_puct 0.125,
alpha 0.5, beta 0.9, L 500; Best-of-32 with min aggregation.

Memory: the AOT plan (``plan=true``, docs/memory.md) shows the paper's 8192-token prompts do not fit 8 x 95 GB
with the XLA attention (full T x T scores are kept for the backward pass); this config therefore uses
2048-token prompts on a data=1 x fsdp=2 x tensor=4 mesh with 192 micro-batches, which the plan puts at
60 GB per device. It trains on unshared prompt + completion rows (``rl.shared_prefix=False``): the shared-prefix
layout (each prompt computed once per group of 8, 3.4x fewer train FLOPs per step in the plan) needs micro-batches
of whole prompt groups, and at 24 micro-batches (one group per device) the plan puts it at 94.7 GB, too close to
95 GB; on a larger slice or with shorter responses, ``rl.shared_prefix=true mesh.micro_batches=24`` is the faster
choice. Check before launching:
    python launch/run.py --config configs/bird_qwen2_5_coder_7b.py plan=true plan.devices=8 plan.hbm=v5p
"""

from rewardsql_jax.stages.run_config import (
    DataConfig,
    InferenceConfig,
    MeshConfig,
    ModelConfigSection,
    PRMConfig,
    PRMLabelConfig,
    RLConfig,
    RunConfig,
    SFTConfig,
)

_TRAIN_QUESTIONS = 9428  # BIRD train
_EPOCH_STEPS = _TRAIN_QUESTIONS // 16

CONFIG = RunConfig(
    name="bird_qwen2_5_coder_7b",
    run_dir="runs/bird_qwen2_5_coder_7b",
    workers=16,
    mesh=MeshConfig(data=1, fsdp=2, tensor=4, micro_batches=192),
    data=DataConfig(source="bird", root="/data/bird", train_split="train", eval_split="dev", ex_mode="bird"),
    model=ModelConfigSection(path="/ckpt/Qwen2.5-Coder-7B-Instruct", max_len=2048 + 512, dtype="bfloat16"),
    # micro-batches of 2 rows, as the RL step (384 rows / 192): 16 / 8
    sft=SFTConfig(steps=3 * _EPOCH_STEPS, batch_size=16, lr=1e-5, warmup_steps=0, micro_batches=8),
    prm_labels=PRMLabelConfig(
        num_questions=_TRAIN_QUESTIONS,
        rollouts_per_question=8,
        completions_per_step=16,
        c_puct=0.125,
        alpha=0.5,
        beta=0.9,
        length_scale=500,
        search_budget=32,
        max_new_tokens=512,
    ),
    prm=PRMConfig(steps=3 * _EPOCH_STEPS, batch_size=16, lr=1e-5, micro_batches=8),
    rl=RLConfig(
        algorithm="grpo",
        steps=200,
        prompts_per_step=48,
        samples_per_prompt=8,
        lr=1e-6,
        clip_eps=0.2,
        kl_beta=0.001,
        entropy_coef=0.001,
        temperature=1.0,
        max_new_tokens=512,
        shared_prefix=False,
    ),
    inference=InferenceConfig(best_of_n=32, temperature=1.0, aggregation="min", max_new_tokens=1024),
)
