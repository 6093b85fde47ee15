"""The SFT stage's train step on the default run's shapes: vocabulary projection at every position vs only at the
target positions (``target_tokens``; the same loss and gradients) vs rows of one database in groups of
``--group`` sharing their schema prefix (``sft.prefix_group``, ``GroupedSFTBatch``: the prefix computed once per
group; the same loss and gradients as its rows), measured interleaved in one run so all see the same load.

Default run shapes (configs/default.py): a 4-layer, 128-wide Qwen2 with a 2,048-token vocabulary; rows of
8 x 448 tokens whose loss covers the ~70-token CoCTE target after a ~295-token prompt.

    python benchmarks/sft_step.py [--rows 8 --seq 448 --target 70 --shared 275 --group 4 --steps 10]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import numpy as np

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.training.batch import GroupedSFTBatch, SFTBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step


def batch(rows: int, seq: int, target: int, prompt: int, rng) -> SFTBatch:
    used = prompt + target
    ids = rng.integers(1, 2048, (rows, seq)).astype(np.int32)
    attn = np.zeros((rows, seq), np.int32)
    attn[:, :used] = 1
    mask = np.zeros((rows, seq), np.int32)
    mask[:, prompt:used] = 1
    return SFTBatch(ids, attn, mask)


def grouped(b: SFTBatch, group: int, shared: int) -> GroupedSFTBatch:
    """The rows of ``b`` (whose groups of ``group`` consecutive rows share their first ``shared`` tokens) as a
    GroupedSFTBatch: each prefix stored once."""
    ids, mask = np.asarray(b.input_ids), np.asarray(b.loss_mask)
    rows, seq = ids.shape
    p = rows // group
    rest = -(-(int(np.asarray(b.attention_mask).sum(axis=1).max()) - shared) // 16) * 16
    prefix = ids[::group, :shared]
    return GroupedSFTBatch(
        prompt_ids=prefix,
        prompt_mask=np.ones_like(prefix),
        completion_ids=ids[:, shared : shared + rest].reshape(p, group, rest),
        loss_mask=mask[:, shared : shared + rest].reshape(p, group, rest),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--seq", type=int, default=448)
    ap.add_argument("--prompt", type=int, default=295)
    ap.add_argument("--target", type=int, default=70)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--shared", type=int, default=275, help="schema prefix tokens shared by a database's rows")
    ap.add_argument("--group", type=int, default=4, help="rows per shared prefix (sft.prefix_group)")
    args = ap.parse_args()
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        attention_bias=True,
    )
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-3))
    rng = np.random.default_rng(0)
    b = batch(args.rows, args.seq, args.target, args.prompt, rng)
    ids = np.asarray(b.input_ids).copy()  # a database's rows share its schema: the first `shared` prompt tokens
    ids[:, : args.shared] = np.repeat(ids[:: args.group, : args.shared], args.group, axis=0)
    b = SFTBatch(ids, b.attention_mask, b.loss_mask)
    bound = -(-args.target // 16) * 16
    variants = {
        "all positions": ({}, b),
        f"target_tokens={bound}": ({"target_tokens": bound}, b),
        f"+ prefix_group={args.group}": ({"target_tokens": bound}, grouped(b, args.group, args.shared)),
    }
    states, steps, times = {}, {}, {k: [] for k in variants}
    for name, (opts, batch_) in variants.items():
        states[name] = create_train_state(build_model(cfg, seed=0), tx, seed=0)
        steps[name] = make_train_step(states[name].graphdef, "sft", opts)
        states[name], m = steps[name](states[name], batch_)  # compile
        jax.block_until_ready(m["loss"])
    losses = {}
    for _ in range(args.steps):  # interleaved: both variants see the same load
        for name, (_, batch_) in variants.items():
            t0 = time.perf_counter()
            states[name], m = steps[name](states[name], batch_)
            jax.block_until_ready(m["loss"])
            times[name].append(time.perf_counter() - t0)
            losses[name] = float(m["loss"])
    base = statistics.median(times["all positions"])
    print(
        f"SFT step, {args.rows} x {args.seq} tokens, {args.target} target tokens per row, "
        f"{jax.devices()[0].platform} ({platform.processor() or platform.machine()}), median of {args.steps}"
    )
    print(f"{'variant':32s} {'step s':>8s} {'tokens/s':>10s} {'speed-up':>9s} {'loss':>10s}")
    for name in variants:
        med = statistics.median(times[name])
        print(f"{name:32s} {med:8.3f} {args.rows * args.seq / med:10.0f} {base / med:8.2f}x {losses[name]:10.6f}")


if __name__ == "__main__":
    main()
