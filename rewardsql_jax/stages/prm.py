"""Stage 4 — PRM training and held-out evaluation (Reward-SQL Sec. 4.2 "training the PRM with a step loss").

The PRM is the SFT policy's backbone read at the step tags: the input is ``format_prm_input(prompt,
response)`` (every step followed by the tag " и"), the score of step i is ``sigma_i = P(" +")`` against
" -" at its tag, trained with the step-level binary cross-entropy of the paper,
``L = -1/|steps| * sum_i [xi_i log sigma_i + (1 - xi_i) log(1 - sigma_i)]`` (``losses.prm`` through
``make_train_step(graphdef, "prm")``), initialised from ``sft/policy``.

Labels from ``prm_labels/labels.jsonl`` are split by *question* (``prm.heldout_fraction``, seeded), so no
held-out question is seen in training. With ``prm.annotate_results`` every step is followed by its
execution result ``<result>...</result>`` (``prefix_sql`` of the step, ``format_step_result``; DESIGN.md).
``prm.balance`` evens out the step labels of the train split (MCTS labels of a weak policy are mostly
negative): ``weight`` sets the BCE's positive-class weight to n_neg / n_pos, ``downsample`` drops (seeded)
responses whose steps all carry the majority label until the classes are as even as whole responses allow.
Every batch has one padded shape, so the step compiles once. Held-out steps are scored before and after
training: step AUC (rank-based, ties averaged) and accuracy at 0.5; NaN AUC with a note when the held-out
set is empty or has a single class. Writes the PRM as an HF directory at ``prm/model``.
"""

from __future__ import annotations

import time

import jax
import numpy as np
from flax import nnx

from rewardsql_jax.models.adapters import has_adapters
from rewardsql_jax.models.prm_head import format_prm_input, step_scores, step_tag_ids
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.sql import format_step_result, prefix_sql, split_cocte
from rewardsql_jax.stats import auc as step_auc
from rewardsql_jax.stats import auc_interval, balanced_threshold
from rewardsql_jax.training.batch import PRMBatch
from rewardsql_jax.training.collate import batch_indices, bucket_length, pad_rows
from rewardsql_jax.training.fit import fit
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_prm_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .context import RunContext
from .policy import load_model, save_model, trainable

STEP_SEPARATOR = "\n\n"


def split_by_question(records, heldout_fraction: float, seed: int) -> tuple[list, list]:
    """(train, held-out) records; a seeded ``heldout_fraction`` of the questions (at least one, never all,
    none when there is only one question) goes to held-out."""
    qids = sorted({r["question_id"] for r in records}, key=str)
    n_held = min(max(1, round(heldout_fraction * len(qids))), len(qids) - 1) if len(qids) > 1 else 0
    held = {qids[i] for i in np.random.default_rng(seed).permutation(len(qids))[:n_held]}
    return [r for r in records if r["question_id"] not in held], [r for r in records if r["question_id"] in held]


def annotate_responses(pool, records) -> list[str]:
    """Each record's response with ``<result>...</result>`` after every step (one pool call for all).

    A step of a CoCTE laid out one CTE per block is executed as ``prefix_sql``, the final block as the
    whole query. A response that does not split that way (unparseable, other layout) gets the whole
    response's result (usually its error) after every block.
    """
    plans: list[tuple[list[str], int, int]] = []
    jobs: list[tuple[str, str]] = []
    for r in records:
        blocks = r["response"].split(STEP_SEPARATOR)
        try:
            n = len(split_cocte(r["response"]).steps)
            queries = [prefix_sql(r["response"], k) for k in range(1, n + 1)] + [r["response"]]
        except ValueError:
            queries = []
        if len(queries) != len(blocks):
            queries = [r["response"]] * len(blocks)
        plans.append((blocks, len(jobs), len(queries)))
        jobs.extend((r["db_path"], q) for q in queries)
    results = pool.map(jobs)
    out = []
    for blocks, start, n in plans:
        # a blank line inside a result would split a step in format_prm_input: collapse it
        notes = [format_step_result(res).replace(STEP_SEPARATOR, "\n") for res in results[start : start + n]]
        out.append(STEP_SEPARATOR.join(f"{b}\n{a}" for b, a in zip(blocks, notes)))
    return out


def encode_examples(tok, records, responses, tag_id: int, max_len: int):
    """[(ids, tag_positions, labels, db_path)] of the records that fit ``max_len`` and whose tags match their
    labels; plus the counts of the dropped ones (too long, tag/label mismatch)."""
    out, too_long, mismatch = [], 0, 0
    for r, resp in zip(records, responses):
        ids = tok(format_prm_input(r["prompt"], resp), add_special_tokens=False).input_ids
        if len(ids) > max_len:
            too_long += 1
            continue
        pos = [i for i, t in enumerate(ids) if t == tag_id]
        if len(pos) != len(r["step_labels"]):
            mismatch += 1
            continue
        out.append((ids, pos, list(r["step_labels"]), r["db_path"]))
    return out, too_long, mismatch


def _label_counts(examples) -> dict:
    labels = [y for e in examples for y in e[2]]
    return {"responses": len(examples), "positives": int(sum(labels)), "negatives": len(labels) - int(sum(labels))}


def balance_examples(examples, mode: str, seed: int) -> tuple[list, float, dict]:
    """(train examples, BCE pos_weight, report) for ``prm.balance`` = none | weight | downsample.

    ``weight``: every example kept, pos_weight = n_neg / n_pos (1 when a class is absent). ``downsample``:
    visits the examples in a seeded random order and drops one whose steps are all of the majority label
    when the majority stays at least as large as the minority without it; pos_weight 1. ``examples`` are
    ``(ids, tag_positions, labels, ...)`` as ``encode_examples`` returns them. The report holds the step counts
    before and after, the weight and the number of dropped responses.
    """
    if mode not in ("none", "weight", "downsample"):
        raise ValueError(f"unknown PRM balance mode {mode!r}; choose none, weight or downsample")
    before = _label_counts(examples)
    n_pos, n_neg = before["positives"], before["negatives"]
    kept, pos_weight = list(examples), 1.0
    if mode == "weight" and n_pos and n_neg:
        pos_weight = n_neg / n_pos
    elif mode == "downsample" and n_pos and n_neg and n_pos != n_neg:
        major, n_major, n_minor = int(n_pos > n_neg), max(n_pos, n_neg), min(n_pos, n_neg)
        drop = set()
        for i in np.random.default_rng(seed).permutation(len(examples)):
            ys = examples[i][2]
            if all(y == major for y in ys) and n_major - len(ys) >= n_minor:
                drop.add(int(i))
                n_major -= len(ys)
        kept = [e for i, e in enumerate(examples) if i not in drop]
    report = {
        "mode": mode,
        "before": before,
        "after": _label_counts(kept),
        "pos_weight": pos_weight,
        "dropped_responses": len(examples) - len(kept),
    }
    if mode != "none" and not (n_pos and n_neg):
        report["note"] = "the train steps have a single class: nothing to balance"
    return kept, pos_weight, report


def prm_arrays(examples, length: int, num_steps: int, pad_id: int, rows: int | None = None) -> PRMBatch:
    """A fixed-shape ``PRMBatch`` ([rows, length], [rows, num_steps]); missing rows are all-masked padding."""
    rows = len(examples) if rows is None else rows
    ex = list(examples) + [([pad_id], [0], [0])] * (rows - len(examples))
    real = [1] * len(examples) + [0] * (rows - len(examples))
    return PRMBatch(
        input_ids=pad_rows([e[0] for e in ex], length, pad_id),
        attention_mask=pad_rows([[1] * len(e[0]) for e in ex], length, 0),
        tag_positions=pad_rows([e[1] for e in ex], num_steps, 0),
        labels=pad_rows([e[2] for e in ex], num_steps, 0),
        step_mask=pad_rows([[k] * len(e[2]) for e, k in zip(ex, real)], num_steps, 0),
    )


def _train_batches(train, pc, seed: int, length: int, num_steps: int, pad: int):
    """``batch(i)``: step i's ``PRMBatch`` rows ([batch_size, length]), or with ``prm.prefix_group`` > 1 a
    ``GroupedPRMBatch`` whose groups of one database share their prompt prefix; one shape for the run."""
    if pc.prefix_group <= 1:
        order = list(batch_indices(len(train), pc.batch_size, pc.steps, seed))
        return lambda i: prm_arrays([train[j] for j in order[i]], length, num_steps, pad)
    keys = [e[3] for e in train]
    # the prefix a database's rows share ends before each row's first step tag
    prefix = shared_prefix_lengths([(e[0], [0] * (e[1][0] if e[1] else len(e[0])) + [1]) for e in train], keys)
    prefix_slots, rest_slots = grouped_slots(train, prefix, spare=1)
    order = prefix_group_batches(keys, pc.prefix_group, pc.batch_size // pc.prefix_group, pc.steps, seed)
    return lambda i: grouped_prm_batch(
        train, order[i], prefix, prefix_slots=prefix_slots, rest_slots=rest_slots, num_steps=num_steps, pad_id=pad
    )


@nnx.jit
def _tag_scores(model, ids, mask, positions, plus, minus):
    return step_scores(model, ids, mask, positions, plus, minus)


def evaluate_steps(model, examples, tags, length: int, num_steps: int, rows: int, pad_id: int) -> dict:
    """Held-out step AUC / accuracy at 0.5 of ``model``'s P(" +") (NaN AUC and a note when undefined), and the
    threshold of best balanced accuracy (``stats.balanced_threshold``)."""
    scores, labels = [], []
    for start in range(0, len(examples), rows):
        chunk = examples[start : start + rows]
        b = prm_arrays(chunk, length, num_steps, pad_id, rows)
        p = np.asarray(
            jax.device_get(
                _tag_scores(model, b.input_ids, b.attention_mask, b.tag_positions, tags.plus_id, tags.minus_id)
            )
        )
        m = b.step_mask.astype(bool)
        scores.extend(p[m].tolist())
        labels.extend(b.labels[m].tolist())
    out = {
        "steps": len(labels),
        "positives": int(sum(labels)),
        "auc": step_auc(scores, labels),
        "auc_ci95": auc_interval(scores, labels)["ci95"],
        "accuracy": float(np.mean((np.asarray(scores) > 0.5) == np.asarray(labels, bool))) if labels else float("nan"),
        # the quadrant table's +PR / -PR cut (evaluate): calibrated here, on held-out steps, not fixed at 0.5
        **balanced_threshold(scores, labels),
    }
    if not labels:
        out["note"] = "no held-out steps (too few labelled questions): AUC and accuracy are undefined"
    elif out["positives"] in (0, len(labels)):
        out["note"] = "held-out steps have a single class: AUC is undefined"
    return out


def run_prm(ctx: RunContext) -> dict:
    cfg, pc, out, t0 = ctx.config, ctx.config.prm, ctx.stage_dir("prm"), time.perf_counter()
    tok = ctx.tokenizer()
    tags = step_tag_ids(tok)
    records = ctx.records("prm_labels", "labels.jsonl")
    if not records:
        raise ValueError(
            "prm_labels/labels.jsonl holds no labelled responses; raise prm_labels.num_questions "
            "or rollouts_per_question (or train the policy longer) and rerun prm_labels"
        )
    responses = annotate_responses(ctx.pool(), records) if pc.annotate_results else [r["response"] for r in records]
    by_id = {id(r): resp for r, resp in zip(records, responses)}
    train_r, held_r = split_by_question(records, pc.heldout_fraction, cfg.seed)
    train, long_t, bad_t = encode_examples(
        tok, train_r, [by_id[id(r)] for r in train_r], tags.tag_id, cfg.model.max_len
    )
    held, long_h, bad_h = encode_examples(tok, held_r, [by_id[id(r)] for r in held_r], tags.tag_id, cfg.model.max_len)
    if not train:
        raise ValueError(
            f"no PRM training example left ({long_t} longer than model.max_len={cfg.model.max_len}, "
            f"{bad_t} with step tags not matching their labels); raise model.max_len"
        )
    train, pos_weight, balance = balance_examples(train, pc.balance, cfg.seed)
    pad = pad_id(tok)
    every = train + held
    length = bucket_length(max(len(e[0]) for e in every))  # one shape for train and eval: one compile each
    num_steps = -(-max(len(e[2]) for e in every) // 4) * 4

    mesh = ctx.mesh()
    model = load_model(ctx.require("sft", "policy"), cfg.model, mesh)
    before = evaluate_steps(model, held, tags, length, num_steps, pc.batch_size, pad)
    opt = OptimizerConfig(
        learning_rate=pc.lr,
        max_grad_norm=1.0,
        schedule="cosine",
        warmup_steps=pc.steps // 10,
        total_steps=pc.steps,
        min_lr_ratio=0.1,
    )
    model = trainable(model, ctx, adapters=not pc.full_finetune)
    trained_part = "adapters" if has_adapters(model) else "every weight"
    state = create_train_state(model, make_optimizer(opt), seed=cfg.seed)
    options = {"tag_token_ids": (tags.plus_id, tags.minus_id), "pos_weight": pos_weight}
    step_fn = make_train_step(state.graphdef, "prm", options, mesh=mesh, micro_batches=cfg.micro_batches("prm"))
    batch, t_train = _train_batches(train, pc, cfg.seed, length, num_steps, pad), time.perf_counter()

    def step(state, i):
        state, m = step_fn(state, batch(i))
        return state, {"loss": m["loss"], "accuracy": m["accuracy"], "grad_norm": m["grad_norm"]}

    run = fit(
        state,
        step,
        **ctx.fit_options("prm", steps=pc.steps, checkpoint_every=pc.checkpoint_every),
        postfix=("loss", "accuracy"),
    )
    state, curve = run.state, [(h["step"], h["loss"], h["accuracy"]) for h in run.history]
    jax.block_until_ready(state.params)
    train_seconds = time.perf_counter() - t_train
    trained = state.model()
    after = evaluate_steps(trained, held, tags, length, num_steps, pc.batch_size, pad)
    save_model(ctx, trained, out / "model")
    train_labels = [y for e in train for y in e[2]]
    return ctx.finish(
        "prm",
        {
            "heldout": after,
            "heldout_before_training": before,
            "train": {
                "responses": len(train),
                "steps": len(train_labels),
                "positives": int(sum(train_labels)),
                "questions": len({r["question_id"] for r in train_r}),
            },
            "balance": balance,
            "heldout_questions": len({r["question_id"] for r in held_r}),
            "dropped_too_long": long_t + long_h,
            "dropped_tag_mismatch": bad_t + bad_h,
            "annotate_results": pc.annotate_results,
            "trained": trained_part,
            "steps": pc.steps,
            "batch_shape": [pc.batch_size, length, num_steps],
            "prefix_group": pc.prefix_group,
            "train_loss_curve": curve,
            "final_loss": curve[-1][1],
            "train_seconds": train_seconds,
            "seconds": time.perf_counter() - t0,
            "model": str(out / "model"),
        },
    )
