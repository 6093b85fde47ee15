"""The PRM stage's train step on a real run's labels: the default's independent rows (``PRMBatch``, each row its
whole prompt) vs rows of one database in groups of ``--group`` sharing their schema prefix (``prm.prefix_group``,
``GroupedPRMBatch``: the same loss and gradients), the same labelled responses in both arms, steps interleaved
in one run so both see the same load. Also prints each arm's loss on the first batch (they must agree).

    python benchmarks/prm_step.py --run runs/default [--group 4 --batch 8 --steps 3]

``--run`` is a run directory with ``sft/policy`` and ``prm_labels/labels.jsonl`` (e.g. the default's, after its
``prm_labels`` stage).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.prm_head import step_tag_ids
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.stages.prm import encode_examples, prm_arrays
from rewardsql_jax.training.collate import bucket_length
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_prm_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="run directory with sft/policy and prm_labels/")
    ap.add_argument("--group", type=int, default=4, help="rows per shared prefix (prm.prefix_group)")
    ap.add_argument("--batch", type=int, default=8, help="rows per step (prm.batch_size)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per arm, after one compiling step")
    args = ap.parse_args(argv)
    labels = args.run / "prm_labels" / "labels.jsonl"
    if not labels.exists():
        sys.exit(f"error: {labels} not found; run the prm_labels stage of {args.run} first")
    records = [json.loads(line) for line in labels.read_text().splitlines() if line.strip()]
    tok = load_tokenizer(args.run / "cold_start" / "tokenizer")
    tags, pad = step_tag_ids(tok), pad_id(tok)
    examples, _, _ = encode_examples(tok, records, [r["response"] for r in records], tags.tag_id, 1024)
    keys = [e[3] for e in examples]
    prefix = shared_prefix_lengths([(e[0], [0] * e[1][0] + [1]) for e in examples], keys)
    prefix_slots, rest_slots = grouped_slots(examples, prefix, spare=1)
    length = bucket_length(max(len(e[0]) for e in examples))
    num_steps = -(-max(len(e[2]) for e in examples) // 4) * 4
    order = prefix_group_batches(keys, args.group, args.batch // args.group, args.steps + 1, seed=0)
    rows = {
        "each row whole (PRMBatch)": lambda i: prm_arrays(
            [examples[j] for j in order[i].reshape(-1)], length, num_steps, pad
        ),
        f"schema once per {args.group} rows (GroupedPRMBatch)": lambda i: grouped_prm_batch(
            examples,
            order[i],
            prefix,
            prefix_slots=prefix_slots,
            rest_slots=rest_slots,
            num_steps=num_steps,
            pad_id=pad,
        ),
    }
    options = {"tag_token_ids": (tags.plus_id, tags.minus_id)}
    arms = {}
    for name in rows:
        model = from_pretrained(args.run / "sft" / "policy")  # one copy an arm: the step donates its state
        state = create_train_state(model, make_optimizer(OptimizerConfig(learning_rate=0.0)), seed=0)
        arms[name] = [state, make_train_step(state.graphdef, "prm", options), [], None]
    for i in range(args.steps + 1):  # step 0 compiles
        for name, make in rows.items():
            state, step_fn, times, _ = arms[name]
            batch = make(i)
            t0 = time.perf_counter()
            state, metrics = step_fn(state, batch)
            jax.block_until_ready(metrics["loss"])
            arms[name][0] = state
            if i == 0:
                arms[name][3] = float(metrics["loss"])
            else:
                times.append(time.perf_counter() - t0)
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, {len(examples)} labelled responses")
    print(
        f"# prompt prefix shared within a database: {int(np.median(prefix))} tokens (median); rows padded to {length}"
    )
    print("| arm | s / step (median) | first-batch loss |")
    print("|---|---|---|")
    medians = {}
    for name, (_, _, times, loss) in arms.items():
        medians[name] = statistics.median(times)
        print(f"| {name} | {medians[name]:.2f} | {loss:.6f} |")
    a, b = medians.values()
    print(f"ratio (rows / grouped): {a / b:.2f}x")


if __name__ == "__main__":
    main()
