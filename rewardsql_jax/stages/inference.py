"""Stage 6 — inference (Reward-SQL Sec. 6): greedy decoding of each trained policy, and for the final
policy N sampled candidates used by PRM Best-of-N (non-executable candidates dropped first, step scores
aggregated by min / product / last / average) and by self-consistency (vote over execution results).

Writes ``inference/predictions.json``: per eval question the greedy SQL of every policy, the N candidates
with their executability, result signature and PRM step scores, and the Best-of-N / vote picks.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

from rewardsql_jax.distributed import is_primary
from rewardsql_jax.rewards.prm_scoring import PRMScorer, aggregate_steps

from .context import RunContext
from .generation import generate_sql
from .policy import load_model


def result_signature(res) -> str | None:
    """Order-insensitive key of an execution result (None when it failed): BIRD's set-of-rows rule."""
    if not res.ok:
        return None
    return json.dumps(sorted({repr(r) for r in res.rows}))


def pick_best_of_n(candidates, aggregation: str) -> int | None:
    """Index of the executable candidate with the highest aggregated PRM score (ties: first)."""
    best, best_score = None, -1.0
    for i, c in enumerate(candidates):
        if c["signature"] is None or c["step_scores"] is None:
            continue
        score = aggregate_steps(c["step_scores"], aggregation)
        if score > best_score:
            best, best_score = i, score
    return best


def pick_self_consistency(candidates) -> int | None:
    """Index of the first candidate of the largest group of identical execution results."""
    votes = collections.Counter(c["signature"] for c in candidates if c["signature"] is not None)
    if not votes:
        return None
    top = votes.most_common(1)[0][0]
    return next(i for i, c in enumerate(candidates) if c["signature"] == top)


def policies(ctx: RunContext) -> dict:
    """Trained policies present in the run, in training order."""
    found = {}
    for stage in ("sft", "rl"):
        path = ctx.run_dir / stage / "policy"
        if (path / "config.json").exists():
            found[stage] = path
    if not found:
        raise FileNotFoundError(f"no trained policy in {ctx.run_dir}; run the sft stage first")
    return found


def read_predictions(path, records) -> list[str]:
    """SQL per eval record from an official-format file: Spider text (one SQL per line, optional
    ``\tdb_id``) or BIRD JSON (``{question_id: "SQL\t----- bird -----\tdb_id"}``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"predictions file {path} does not exist")
    if path.suffix == ".json":
        payload = json.loads(path.read_text())
        missing = [r["question_id"] for r in records if str(r["question_id"]) not in payload]
        if missing:
            raise ValueError(f"{path} has no prediction for question_id(s) {missing[:5]}...; it must cover the eval set")
        return [payload[str(r["question_id"])].split("\t----- bird -----\t")[0] for r in records]
    lines = path.read_text().splitlines()
    if len(lines) < len(records):
        raise ValueError(f"{path} has {len(lines)} lines but the eval set has {len(records)} questions; "
                         f"give one SQL per line, in eval order")
    return [line.split("\t")[0] for line in lines[:len(records)]]


def run_inference(ctx: RunContext) -> dict:
    cfg, inf = ctx.config, ctx.config.inference
    records = ctx.records("cold_start", "eval.jsonl")
    if inf.predictions_file:
        preds = [{"question_id": r["question_id"], "db_id": r["db_id"], "predictions": sql, "candidates": []}
                 for r, sql in zip(records, read_predictions(inf.predictions_file, records))]
        if is_primary():
            (ctx.stage_dir("inference") / "predictions.json").write_text(json.dumps(preds, indent=1))
        return ctx.finish("inference", {"questions": len(records), "policies": [], "source": inf.predictions_file})
    tok, pool = ctx.tokenizer(), ctx.pool()
    prompts = [r["prompt"] for r in records]
    found = policies(ctx)
    preds = [{"question_id": r["question_id"], "db_id": r["db_id"]} for r in records]
    for stage, path in found.items():
        model = load_model(path, cfg.model.dtype)
        greedy = generate_sql(model, tok, prompts, max_new_tokens=inf.max_new_tokens, seed=cfg.seed,
                              desc=f"greedy ({stage})")
        for p, texts in zip(preds, greedy.texts):
            p[f"greedy_{stage}"] = texts[0]
    final_stage = list(found)[-1]
    model = load_model(found[final_stage], cfg.model.dtype)
    sampled = generate_sql(model, tok, prompts, num_samples=inf.best_of_n, temperature=inf.temperature,
                           max_new_tokens=inf.max_new_tokens, seed=cfg.seed + 1, desc=f"best-of-{inf.best_of_n} ({final_stage})")
    jobs = [(r["db_path"], sql) for r, texts in zip(records, sampled.texts) for sql in texts]
    results = pool.map(jobs, progress=True)
    prm_path = ctx.run_dir / "prm" / "model"
    scorer = PRMScorer(load_model(prm_path, cfg.model.dtype), tok) if (prm_path / "config.json").exists() else None
    k = 0
    for r, p, texts in zip(records, preds, sampled.texts):
        scores = scorer.score([r["prompt"]] * len(texts), texts) if scorer else [None] * len(texts)
        cands = []
        for sql, s in zip(texts, scores):
            cands.append({"sql": sql, "signature": result_signature(results[k]), "step_scores": s})
            k += 1
        p["candidates"] = cands
        p["policy_for_candidates"] = final_stage
        bon = pick_best_of_n(cands, inf.aggregation) if scorer else None
        sc = pick_self_consistency(cands)
        p["best_of_n"] = cands[bon]["sql"] if bon is not None else (texts[0] if scorer else None)
        p["self_consistency"] = cands[sc]["sql"] if sc is not None else texts[0]
    out = ctx.stage_dir("inference") / "predictions.json"
    if is_primary():  # every process sampled the same predictions (same seeds, local models)
        out.write_text(json.dumps(preds, indent=1))
    return ctx.finish("inference", {"questions": len(records), "policies": list(found),
                                    "candidates_per_question": inf.best_of_n, "prm_used": scorer is not None,
                                    "executable_candidate_rate": sum(c["signature"] is not None for p in preds
                                                                     for c in p["candidates"]) / max(len(jobs), 1)})
