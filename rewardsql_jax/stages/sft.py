"""Stage 2 — cold-start SFT of the policy on Chain-of-CTE targets (Reward-SQL Sec. 4.1).

Masked token cross-entropy on the target SQL (+ EOS), prompt tokens masked; one jitted, donated train
step (``training.make_train_step(..., "sft")``, the vocabulary projection only at target positions) run by ``training.fit`` (``sft.checkpoint_every`` > 0: resumable).
Writes ``sft/policy/`` (HF directory) and metrics.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from rewardsql_jax.models.sharding import shard_model
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.training.batch import SFTBatch
from rewardsql_jax.training.collate import batch_indices, bucket_length, encode_pair, sft_arrays
from rewardsql_jax.training.fit import fit
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_sft_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .context import RunContext
from .policy import new_or_pretrained_policy, save_model


def run_sft(ctx: RunContext) -> dict:
    cfg, out = ctx.config, ctx.stage_dir("sft")
    tok = ctx.tokenizer()
    records = ctx.records("cold_start", "train.jsonl")
    # one example per kept CoCTE of a question (cold_start's "targets"; older runs: the single "target")
    pairs = [(r, t) for r in records for t in (r.get("targets") or [r["target"]])]
    encoded = [encode_pair(tok, r["prompt"], t) for r, t in pairs]
    too_long = sum(len(e[0]) > cfg.model.max_len for e in encoded)
    keys = [r["db_id"] for (r, _), e in zip(pairs, encoded) if len(e[0]) <= cfg.model.max_len]
    encoded = [e for e in encoded if len(e[0]) <= cfg.model.max_len]
    if not encoded:
        raise ValueError(f"every SFT example is longer than model.max_len={cfg.model.max_len}; raise it")
    model, mesh = new_or_pretrained_policy(ctx), ctx.mesh()
    if mesh is not None:
        model = shard_model(model, mesh)
    s = cfg.sft
    opt = OptimizerConfig(
        learning_rate=s.lr,
        weight_decay=s.weight_decay,
        max_grad_norm=s.grad_clip,
        schedule="cosine",
        warmup_steps=min(s.warmup_steps, s.steps - 1),
        total_steps=s.steps,
        min_lr_ratio=0.1,
    )
    state = create_train_state(model, make_optimizer(opt), seed=cfg.seed)
    pad = pad_id(tok)
    # the loss covers the target only (~20% of a row): project just those positions onto the vocabulary
    targets = -(-max(sum(e[1]) for e in encoded) // 16) * 16
    step_fn = make_train_step(
        state.graphdef, "sft", {"target_tokens": targets}, mesh=mesh, micro_batches=cfg.mesh.micro_batches
    )
    make_batch = _batches(encoded, keys, s, cfg.seed, pad)
    tokens, t0 = [0], time.perf_counter()

    def step(state, i):
        batch, n_tokens = make_batch(i)
        tokens[0] += n_tokens
        state, m = step_fn(state, batch)
        return state, {"loss": m["loss"], "grad_norm": m["grad_norm"]}

    run = fit(state, step, **ctx.fit_options("sft", steps=s.steps, checkpoint_every=s.checkpoint_every))
    state, losses = run.state, [(h["step"], h["loss"]) for h in run.history]
    jax.block_until_ready(state.params)
    elapsed = time.perf_counter() - t0
    save_model(ctx, state.model(), out / "policy")
    return ctx.finish(
        "sft",
        {
            "steps": s.steps,
            "examples": len(encoded),
            "dropped_too_long": too_long,
            "resumed_from_step": run.resumed_from,
            "final_loss": losses[-1][1],
            "loss_curve": losses,
            "seconds": elapsed,
            "tokens_per_s": tokens[0] / elapsed,
            "prefix_group": s.prefix_group,
            "final_loss_mean_last": float(np.mean([loss for _, loss in losses[-3:]])),
        },
    )


def _batches(encoded, keys, s, seed: int, pad: int):
    """``batch(i) -> (train batch of step i, tokens it holds)``, one shape for the whole run (one compile):
    ``SFTBatch`` rows, or with ``sft.prefix_group`` > 1 a ``GroupedSFTBatch`` whose groups of one database
    share their schema prefix (tokens then count each prefix once, as the step computes it)."""
    if s.prefix_group > 1:
        prefix = shared_prefix_lengths(encoded, keys)
        slots = grouped_slots(encoded, prefix)
        order = prefix_group_batches(keys, s.prefix_group, s.batch_size // s.prefix_group, s.steps, seed)

        def grouped(i):
            groups = order[i]
            n = sum(prefix[g[0]] + sum(len(encoded[j][0]) - prefix[j] for j in g) for g in groups)
            batch = grouped_sft_batch(encoded, groups, prefix, prefix_slots=slots[0], rest_slots=slots[1], pad_id=pad)
            return batch, n

        return grouped
    length = bucket_length(max(len(e[0]) for e in encoded))
    rows = list(batch_indices(len(encoded), s.batch_size, s.steps, seed))

    def independent(i):
        ids, attn, loss_mask = sft_arrays([encoded[j] for j in rows[i]], length, pad)
        return SFTBatch(input_ids=ids, attention_mask=attn, loss_mask=loss_mask), int(attn.sum())

    return independent
