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
from rewardsql_jax.training.collate import (
    batch_indices,
    encode_pair,
    ladder_length,
    length_ladder,
    sft_arrays,
    target_token_bound,
)
from rewardsql_jax.training.fit import FitResult, fit
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_sft_batch,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .context import RunContext
from .policy import new_or_pretrained_policy, save_model, trainable


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
    # the loss covers the target only (~20% of a row): project just those positions onto the vocabulary
    targets = target_token_bound(e[1] for e in encoded)
    make_batch = _batches(encoded, keys, s, cfg.seed, pad_id(tok))
    tokens, t0 = [0], time.perf_counter()

    def batch(i):
        b, n_tokens = make_batch(i)
        tokens[0] += n_tokens
        return b

    run = train_sft(
        trainable(new_or_pretrained_policy(ctx), ctx),
        batch,
        opt=opt,
        seed=cfg.seed,
        loss_options={"target_tokens": targets},
        mesh=ctx.mesh(),
        micro_batches=cfg.micro_batches("sft"),
        **ctx.fit_options("sft", steps=s.steps, checkpoint_every=s.checkpoint_every),
    )
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


def train_sft(
    model,
    batch,
    *,
    opt: OptimizerConfig,
    seed: int,
    loss_options: dict,
    mesh=None,
    micro_batches: int = 1,
    **fit_options,
) -> FitResult:
    """The SFT trainer (this stage's, and SQLConductor's action model and policy): ``model`` (sharded over ``mesh``)
    trained by the jitted ``"sft"`` train step (``loss_options``; ``micro_batches`` for exact gradient accumulation)
    on ``batch(i)``, step i's ``SFTBatch`` / ``GroupedSFTBatch``, under ``training.fit`` (``fit_options``: steps,
    progress label, logging, checkpoints; a run with checkpoints resumes from its newest one)."""
    if mesh is not None:
        model = shard_model(model, mesh)
    state = create_train_state(model, make_optimizer(opt), seed=seed)
    step_fn = make_train_step(state.graphdef, "sft", loss_options, mesh=mesh, micro_batches=micro_batches)

    def step(state, i):
        state, m = step_fn(state, batch(i))
        return state, {"loss": m["loss"], "grad_norm": m["grad_norm"]}  # fetched on logged steps

    return fit(state, step, **fit_options)


def sft_batches(encoded, *, batch_size: int, steps: int, seed: int, pad: int, weights=None, length_buckets: int = 1):
    """``batch(i) -> (SFTBatch of step i, tokens it holds)`` over ``encoded`` (ids, loss_mask) pairs: step i takes
    batch i of ``batch_indices(seed)`` (so a resumed run sees the same batches), padded to the shortest of at most
    ``length_buckets`` lengths (``collate.length_ladder``; 1 = one length for the whole run, one compile).
    ``weights``: one per example, each sequence's loss weight (``SFTBatch.weights``)."""
    rows = list(batch_indices(len(encoded), batch_size, steps, seed))
    needs = [max(len(encoded[j][0]) for j in r) for r in rows]
    ladder = length_ladder(needs, length_buckets)
    w = None if weights is None else np.asarray(weights, np.float32)

    def independent(i):
        ids, attn, loss_mask = sft_arrays([encoded[j] for j in rows[i]], ladder_length(needs[i], ladder), pad)
        batch = SFTBatch(
            input_ids=ids, attention_mask=attn, loss_mask=loss_mask, weights=None if w is None else w[rows[i]]
        )
        return batch, int(attn.sum())

    return independent


def _batches(encoded, keys, s, seed: int, pad: int):
    """``batch(i) -> (train batch of step i, tokens it holds)``, padded to at most ``sft.length_buckets`` lengths
    (per dimension): ``SFTBatch`` rows, or with ``sft.prefix_group`` > 1 a ``GroupedSFTBatch`` whose groups of one
    database share their schema prefix (tokens then count each prefix once, as the step computes it)."""
    if s.prefix_group > 1:
        prefix = shared_prefix_lengths(encoded, keys)
        order = prefix_group_batches(keys, s.prefix_group, s.batch_size // s.prefix_group, s.steps, seed)
        prefix_needs = [max(prefix[g[0]] for g in groups) for groups in order]
        rest_needs = [max(len(encoded[j][0]) - prefix[j] for g in groups for j in g) for groups in order]
        prefix_ladder = length_ladder(prefix_needs, s.length_buckets, multiple=16)
        rest_ladder = length_ladder(rest_needs, s.length_buckets, multiple=16)

        def grouped(i):
            groups = order[i]
            n = sum(prefix[g[0]] + sum(len(encoded[j][0]) - prefix[j] for j in g) for g in groups)
            batch = grouped_sft_batch(
                encoded,
                groups,
                prefix,
                prefix_slots=ladder_length(prefix_needs[i], prefix_ladder),
                rest_slots=ladder_length(rest_needs[i], rest_ladder),
                pad_id=pad,
            )
            return batch, n

        return grouped
    return sft_batches(
        encoded, batch_size=s.batch_size, steps=s.steps, seed=seed, pad=pad, length_buckets=s.length_buckets
    )
