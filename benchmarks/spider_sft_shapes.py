"""The Spider SFT step (SmolLM2-135M, LoRA r16 on every projection, 4 rows of one database sharing their schema
prefix) padded to the run's longest shape vs the shorter shapes ``sft.length_buckets`` picks for a typical step,
the same 4 examples in every arm, in one run: the first call of each shape (its compile) and the steady step time.

    python benchmarks/spider_sft_shapes.py --run runs/spider_pretrained [--repeats 3]

``--run`` is a run directory of ``configs/spider_pretrained.py`` with its ``cold_start`` stage done. The examples are
the first 4 of the database whose shared prefix is the median one; shapes are (prefix slots, rest slots).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.policy import new_or_pretrained_policy, trainable
from rewardsql_jax.training.collate import encode_pair, target_token_bound
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import grouped_sft_batch, grouped_slots, shared_prefix_lengths
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

LORA = ["model.lora.rank=16", "model.lora.alpha=32", "model.lora.targets=q,k,v,o,gate,up,down"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="run directory with cold_start/ (spider_pretrained)")
    ap.add_argument("--repeats", type=int, default=3, help="calls per shape; the first one compiles")
    args = ap.parse_args()
    cfg = apply_overrides(load_config("configs/spider_pretrained.py"), [f"run_dir={args.run}", *LORA])
    ctx = RunContext(config=cfg, run_dir=args.run)
    tok = ctx.tokenizer()
    records = [json.loads(line) for line in open(args.run / "cold_start" / "train.jsonl")]
    pairs = [(r, t) for r in records for t in (r.get("targets") or [r["target"]])]
    encoded = [encode_pair(tok, r["prompt"], t) for r, t in pairs]
    keys = [r["db_id"] for (r, _), e in zip(pairs, encoded) if len(e[0]) <= cfg.model.max_len]
    encoded = [e for e in encoded if len(e[0]) <= cfg.model.max_len]
    prefix = shared_prefix_lengths(encoded, keys)
    longest = grouped_slots(encoded, prefix)
    by_key: dict = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    median_key = sorted(by_key, key=lambda k: prefix[by_key[k][0]])[len(by_key) // 2]
    group = np.array([by_key[median_key][:4]])
    need = (prefix[group[0, 0]], max(len(encoded[j][0]) - prefix[j] for j in group[0]))
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, {len(encoded)} examples")
    print(f"# group of 4 on {median_key}: prefix {need[0]} tokens, longest rest {need[1]}; run's longest {longest}")

    model = trainable(new_or_pretrained_policy(ctx), ctx)
    opt = OptimizerConfig(learning_rate=1e-3, total_steps=100, warmup_steps=3, schedule="cosine")
    state = create_train_state(model, make_optimizer(opt), seed=0)
    target_tokens = target_token_bound(e[1] for e in encoded)
    step = make_train_step(state.graphdef, "sft", {"target_tokens": target_tokens}, micro_batches=1)
    shapes = [longest, (-(-need[0] // 256) * 256, -(-need[1] // 64) * 64), (-(-need[0] // 256) * 256, 256)]
    steady = {}
    print("shape (prefix, rest) | first call s | steady step s | vs longest")
    for shape in shapes:
        b = grouped_sft_batch(encoded, group, prefix, prefix_slots=shape[0], rest_slots=shape[1], pad_id=pad_id(tok))
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            state, m = step(state, b)
            jax.block_until_ready(m["loss"])
            times.append(time.perf_counter() - t)
        steady[shape] = statistics.median(times[1:])
        print(f"{shape} | {times[0]:.1f} | {steady[shape]:.1f} | {steady[longest] / steady[shape]:.2f}x", flush=True)


if __name__ == "__main__":
    main()
