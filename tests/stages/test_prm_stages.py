"""Stages 3 and 4 (prm_labels, prm) on a tiny generated benchmark: real SQL execution, a tiny policy.

One run directory holds cold-start data and an untrained tiny policy standing in for ``sft/policy`` (the SFT
stage has its own tests; the stages here only need a policy checkpoint). A second run copies it and replaces
the sampler by a scripted policy whose truth is known, so the OmegaPRM labels can be checked exactly.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.prm_head import format_prm_input, step_tag_ids
from rewardsql_jax.stages import prm_labels as labels_stage
from rewardsql_jax.stages.cold_start import read_jsonl, run_cold_start
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.policy import new_or_pretrained_policy, save_model
from rewardsql_jax.stages.prm import annotate_responses, encode_examples, evaluate_steps, run_prm
from rewardsql_jax.stages.prm_labels import response_steps, run_prm_labels

SMOKE = "configs/smoke.py"
WRONG_FINAL = "SELECT 'nope'"
WRONG_COMPLETION = "SELECT 'wrong completion'"
GARBAGE = "garbage words\n\nmore ( stuff"


def _context(run_dir, *overrides):
    cfg = apply_overrides(load_config(SMOKE), [f"run_dir={run_dir}", "workers=1", *overrides])
    return RunContext.create(cfg)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    ctx = _context(tmp_path_factory.mktemp("prm_base"))
    run_cold_start(ctx)
    save_model(ctx, new_or_pretrained_policy(ctx), ctx.stage_dir("sft") / "policy")
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def scripted_run(base_run, tmp_path_factory):
    """A run whose 'policy' answers every question with [gold CoCTE, gold with a wrong final query, garbage]
    and completes a gold prefix with [the gold rest, a wrong final query] (anything else: wrong)."""
    run_dir = tmp_path_factory.mktemp("prm_scripted")
    for stage in ("cold_start", "sft"):
        shutil.copytree(base_run.run_dir / stage, run_dir / stage)
    ctx = _context(
        run_dir,
        "prm_labels.rollouts_per_question=3",
        "prm_labels.search_budget=3",
        "prm.heldout_fraction=0.25",
        "prm.steps=4",
    )
    records = read_jsonl(ctx.require("cold_start", "train.jsonl"))
    golds = {r["prompt"]: response_steps(r["target"])[0] for r in records}

    def scripted(model, tok, prompts, *, k, cfg, seed):
        out = []
        for p in prompts:
            q = max((q for q in golds if p.startswith(q)), key=len)
            gold, rest = golds[q], p[len(q) :]
            if not rest:
                out.append(["\n\n".join(gold), "\n\n".join(gold[:-1] + (WRONG_FINAL,)), GARBAGE][:k])
                continue
            # a completion prompt ends with the prefix's last step; the policy writes the blank line itself
            m = next((m for m in range(1, len(gold)) if rest == "\n\n".join(gold[:m])), None)
            good = ["\n\n" + "\n\n".join(gold[m:])] if m is not None else []
            out.append((good + ["\n\n" + WRONG_COMPLETION] * k)[:k])
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(labels_stage, "_padded_generate", scripted)
    try:
        metrics = run_prm_labels(ctx)
    finally:
        mp.undo()
    yield ctx, metrics, golds
    ctx.close()


def _check_record_shapes(records, tok):
    tag = step_tag_ids(tok).tag_id
    for rec in records:
        y = rec["step_labels"]
        assert y and set(y) <= {0, 1}
        assert y == sorted(y, reverse=True)  # 1 ... 1 0 ... 0
        assert rec["first_wrong"] == (y.index(0) if 0 in y else None)
        ids = tok(format_prm_input(rec["prompt"], rec["response"]), add_special_tokens=False).input_ids
        assert sum(t == tag for t in ids) == len(y)  # one PRM step tag per label


def test_prm_labels_with_the_tiny_policy(base_run):
    m = run_prm_labels(base_run)
    path = base_run.run_dir / "prm_labels" / "labels.jsonl"
    records = read_jsonl(path)
    assert records and m["labelled_rollouts"] == len(records)
    _check_record_shapes(records, base_run.tokenizer())
    steps = [y for r in records for y in r["step_labels"]]
    assert m["steps"] == len(steps) == m["positive_steps"] + m["negative_steps"]
    assert m["positive_steps"] == sum(steps)
    assert m["questions"] == 4 and m["rollouts_sampled"] == 8
    assert m["completions"] == 2 * m["mc_evaluations"]
    assert m["db_calls"] >= m["rollouts_sampled"] - m["rollouts_empty"] - m["rollouts_duplicate"]
    assert m["search_iterations"] <= 4 * 2
    assert json.loads((base_run.run_dir / "prm_labels" / "metrics.json").read_text())["stage"] == "prm_labels"


def test_prm_labels_are_exact_for_a_scripted_policy(scripted_run):
    ctx, m, golds = scripted_run
    records = read_jsonl(ctx.run_dir / "prm_labels" / "labels.jsonl")
    _check_record_shapes(records, ctx.tokenizer())
    by_q = {}
    for r in records:
        by_q.setdefault(r["prompt"], []).append(r)
    assert len(by_q) == 4
    expected_mc = 0
    for prompt, recs in by_q.items():
        gold = golds[prompt]
        n = len(gold)
        got = {(r["source"], r["response"]): r["step_labels"] for r in recs}
        assert (
            got
            == {
                ("rollout", "\n\n".join(gold)): [1] * n,  # reaches the gold result
                ("search", "\n\n".join(gold[:-1] + (WRONG_FINAL,))): [1] * (n - 1) + [0],  # only the final is wrong
                ("search", GARBAGE): [0, 0],  # wrong from step 1
                ("search", "\n\n".join(gold[:1] + (WRONG_COMPLETION,))): [1, 0],  # a searched completion
            }
        )
        assert [r["parseable"] for r in recs if r["response"] == GARBAGE] == [False]
        expected_mc += 1 + (n - 1)  # garbage: one midpoint; wrong final: a gold prefix per midpoint
    assert m["mc_evaluations"] == expected_mc and m["completions"] == 2 * expected_mc
    assert m["search_iterations"] == 4 * 3 and m["rollouts_unparseable"] == 4
    assert m["sources"] == {"rollout": 4, "search": 12}


def test_prm_trains_and_reports_heldout_auc(scripted_run):
    ctx, _, _ = scripted_run
    m = run_prm(ctx)
    held = m["heldout"]
    assert m["heldout_questions"] == 1 and m["train"]["questions"] == 3
    assert 0 < held["positives"] < held["steps"]  # the scripted labels give both classes
    assert 0.0 <= held["auc"] <= 1.0 and 0.0 <= held["accuracy"] <= 1.0
    assert 0 < m["train"]["positives"] < m["train"]["steps"]
    assert len(m["train_loss_curve"]) >= 2 and all(math.isfinite(loss) for _, loss, _ in m["train_loss_curve"])
    assert m["dropped_tag_mismatch"] == 0
    assert m["balance"]["mode"] == "none" and m["balance"]["before"] == m["balance"]["after"]
    model = from_pretrained(ctx.run_dir / "prm" / "model")
    assert model.config.vocab_size >= len(ctx.tokenizer())
    assert (ctx.run_dir / "prm" / "model" / "tokenizer.json").exists() or any(
        (ctx.run_dir / "prm" / "model").glob("tokenizer*")
    )


def _labelled_copy(scripted_run, run_dir, *overrides):
    """A context on a copy of the scripted run's cold_start, sft and prm_labels stages, with PRM ``overrides``."""
    src, _, _ = scripted_run
    for stage in ("cold_start", "sft", "prm_labels"):
        shutil.copytree(src.run_dir / stage, run_dir / stage)
    return _context(run_dir, "prm_labels.rollouts_per_question=3", "prm.heldout_fraction=0.25", *overrides)


@pytest.mark.parametrize("balance", ["weight", "downsample"])
def test_prm_trains_with_balanced_labels(scripted_run, tmp_path, balance):
    ctx = _labelled_copy(scripted_run, tmp_path, "prm.steps=2", f"prm.balance={balance}")
    try:
        m = run_prm(ctx)
    finally:
        ctx.close()
    b = m["balance"]
    before, after = b["before"], b["after"]
    assert b["mode"] == balance and before["positives"] > 0 and before["negatives"] > 0
    assert after["positives"] == m["train"]["positives"] and after["responses"] == m["train"]["responses"]
    assert after["positives"] + after["negatives"] == m["train"]["steps"]
    if balance == "weight":
        assert after == before and b["pos_weight"] == pytest.approx(before["negatives"] / before["positives"])
    else:
        minority = min(("positives", "negatives"), key=before.get)
        majority = "negatives" if minority == "positives" else "positives"
        assert b["pos_weight"] == 1.0 and after[minority] == before[minority]  # only majority-only responses go
        assert after[minority] <= after[majority] < before[majority] and b["dropped_responses"] > 0
        assert before["responses"] - after["responses"] == b["dropped_responses"]
    assert all(math.isfinite(loss) for _, loss, _ in m["train_loss_curve"])


def test_result_annotations_keep_one_tag_per_label(scripted_run):
    ctx, _, _ = scripted_run
    records = ctx.records("prm_labels", "labels.jsonl")  # db paths resolved against the run directory
    annotated = annotate_responses(ctx.pool(), records)
    tok = ctx.tokenizer()
    for rec, text in zip(records, annotated):
        assert text.count("<result>") == len(rec["step_labels"])
    gold = next(t for r, t in zip(records, annotated) if r["source"] == "rollout")
    assert "Execution error" not in gold  # every prefix of a verified CoCTE executes
    garbage = next(t for r, t in zip(records, annotated) if r["response"] == GARBAGE)
    assert garbage.count("Execution error") == 2
    ex, too_long, mismatch = encode_examples(tok, records, annotated, step_tag_ids(tok).tag_id, 10_000)
    assert mismatch == 0 and too_long == 0 and len(ex) == len(records)


def test_evaluation_without_heldout_steps_is_nan_with_a_note(base_run):
    tok = base_run.tokenizer()
    out = evaluate_steps(None, [], step_tag_ids(tok), 64, 4, 4, 0)
    assert math.isnan(out["auc"]) and math.isnan(out["accuracy"]) and "no held-out" in out["note"]
    assert np.isnan(out["auc"])


def test_prm_trains_on_groups_that_share_their_schema_prefix(scripted_run, tmp_path):
    """``prm.prefix_group=2``: each batch is groups of 2 labelled responses of one database (GroupedPRMBatch, the
    schema computed once a group); the stage trains and evaluates as with independent rows."""
    ctx = _labelled_copy(scripted_run, tmp_path, "prm.steps=3", "prm.batch_size=4", "prm.prefix_group=2")
    try:
        m = run_prm(ctx)
    finally:
        ctx.close()
    assert m["prefix_group"] == 2 and len(m["train_loss_curve"]) >= 2
    assert all(math.isfinite(loss) for _, loss, _ in m["train_loss_curve"])
    assert 0.0 <= m["heldout"]["auc"] <= 1.0
    with pytest.raises(ValueError, match=r"prm\.prefix_group=3 must be 0 \(off\) or divide prm\.batch_size=4"):
        apply_overrides(load_config(SMOKE), ["prm.batch_size=4", "prm.prefix_group=3"])
