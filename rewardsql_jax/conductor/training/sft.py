"""Supervised training of the conductor's small models (action model SFT; stability-weighted policy SFT) on the
pipeline's SFT trainer (``stages.sft.train_sft``, ``stages.sft.sft_batches``).

Stability-weighted SFT (SQLConductor Sec. 4.4): each sequence's loss is the mean token NLL over its
policy-written tokens (``<results>`` and prompt masked, the "result-masked loss" normalised per sequence),
times the workflow's power-normalised weight w_tau, i.e. ``losses.sft(reduction="sequence_mean",
weights=w)`` in the shared jitted train step. Examples are masked pairs (``training.collate.encode_pair`` for a
prompt and its target, ``trajectory.results_mask`` for a trajectory) with a weight: ``SFTSample``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rewardsql_jax.models import fresh_model, from_pretrained
from rewardsql_jax.models.vocab import grow_vocab
from rewardsql_jax.stages.sft import sft_batches
from rewardsql_jax.stages.sft import train_sft as stage_sft
from rewardsql_jax.training.collate import target_token_bound
from rewardsql_jax.training.optimizer import OptimizerConfig
from rewardsql_jax.training.step_checkpoints import StepCheckpoints


@dataclasses.dataclass(frozen=True)
class SFTSample:
    """Token ids, loss mask (1 = supervised) and the sequence weight."""

    ids: Sequence[int]
    mask: Sequence[int]
    weight: float = 1.0


def new_model(shape, tokenizer, seed: int):
    """The untrained model of ``shape`` (a ``stages.run_config.ModelConfigSection``) for ``tokenizer``: with
    ``shape.path``, that pretrained checkpoint with its vocabulary grown to the tokenizer's added tags
    (``models.vocab.grow_vocab``); else a fresh Qwen2 (``models.fresh_model``: the same architecture as the
    Reward-SQL pipeline's fresh policy)."""
    if shape.path:  # (a vocabulary padded past its tokenizer already holds rows for the tags)
        model = from_pretrained(shape.path, dtype=shape.dtype)
        return grow_vocab(model, max(len(tokenizer), model.config.vocab_size))
    return fresh_model(shape, len(tokenizer), tokenizer.eos_token_id, seed)


def train_conductor_sft(
    model,
    samples,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    pad_id: int,
    seed: int = 0,
    reduction: str = "token_mean",
    warmup_steps: int = 10,
    max_len: int | None = None,
    log=None,
    on_log=None,
    desc: str = "sft",
    checkpoint_dir=None,
    checkpoint_every: int = 0,
    stop_after: int = 0,
    mesh=None,
    micro_batches: int = 1,
):
    """Train ``model`` on ``samples``; returns (trained model, [(step, loss)]). Over-long samples are dropped.

    One ``training.fit`` run: step i trains on batch i of ``batch_indices(seed)``, so with ``checkpoint_dir`` a
    killed (or ``stop_after``-stopped) run resumes from its newest checkpoint there and ends with the parameters of
    an uninterrupted one. ``mesh`` shards the model and each batch; ``micro_batches`` splits each batch for exact
    gradient accumulation. Every 10th step (and the last) is fetched from the device and logged: ``log`` gets a
    one-line summary and ``on_log(step, {"loss": ..., "grad_norm": ...})`` the metrics.
    """
    if max_len is not None:
        samples = [s for s in samples if len(s.ids) <= max_len]
    if not samples:
        raise ValueError("no SFT samples fit the model's max_len; raise it or shorten the prompts")
    opt = OptimizerConfig(
        learning_rate=lr,
        max_grad_norm=1.0,
        schedule="cosine",
        warmup_steps=min(warmup_steps, steps - 1),
        total_steps=max(steps, 2),
        min_lr_ratio=0.1,
    )
    batches = sft_batches(
        [(s.ids, s.mask) for s in samples],
        batch_size=batch_size,
        steps=steps,
        seed=seed,
        pad=pad_id,
        weights=[s.weight for s in samples],
    )

    def report(record):
        if "step" not in record:  # the resume notice (fit says it)
            return
        if on_log:
            on_log(record["step"], {"loss": record["loss"], "grad_norm": record["grad_norm"]})
        if log:
            log(f"  {desc} step {record['step']}: loss {record['loss']:.4f}")

    # the vocabulary projection at the supervised positions only (the SFT stage's bound: the longest target, in 16s)
    target_tokens = target_token_bound(s.mask for s in samples)
    result = stage_sft(
        model,
        lambda i: batches(i)[0],
        opt=opt,
        seed=seed,
        loss_options={"reduction": reduction, "target_tokens": target_tokens},
        mesh=mesh,
        micro_batches=micro_batches,
        steps=steps,
        desc=desc,
        log=report,
        checkpoints=None if checkpoint_dir is None else StepCheckpoints(checkpoint_dir, name=desc),
        log_every=10,
        checkpoint_every=checkpoint_every,
        stop_after=stop_after,
        say=log or print,
    )
    return result.state.model(), [(r["step"], r["loss"]) for r in result.history]
