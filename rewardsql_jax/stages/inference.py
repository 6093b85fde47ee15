"""Stage 6 — inference (Reward-SQL Sec. 6): greedy decoding of each trained policy, and for the final
policy N sampled candidates used by PRM Best-of-N (non-executable candidates dropped first, step scores
aggregated by min / product / last / average) and by self-consistency (vote over execution results).

With ``inference.zero_shot`` also the pretrained model's zero-shot answer (``stages/zero_shot.py``: ``zero_shot``, the
SQL read from its reply ``zero_shot_reply``); without a trained policy that alone.

Writes ``inference/predictions.json``: per eval question the greedy SQL of every policy, the N candidates
with their executability, result signature and PRM step scores, and the Best-of-N / vote picks; when the final
policy is the RL one, also ``sft_candidates`` (N executed samples of the SFT policy at the same temperature, no
PRM scores), from which evaluate reports the SFT policy's headroom (greedy vs pass@1 / pass@N).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from tqdm.auto import tqdm

from rewardsql_jax.distributed import is_primary, process_count
from rewardsql_jax.models.sharding import placement
from rewardsql_jax.rewards.prm_scoring import PRMScorer, aggregate_steps
from rewardsql_jax.sampling.inputs import PROMPTS_PER_CALL

from .context import RunContext
from .generation import generate_sql
from .policy import load_model
from .shares import exchange_shares, in_chunk_order, owned_chunks
from .zero_shot import zero_shot_answers


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


def policies(ctx: RunContext, *, required: bool = True) -> dict:
    """Trained policies present in the run, in training order (none is an error when ``required``)."""
    found = {}
    for stage in ("sft", "rl"):
        path = ctx.run_dir / stage / "policy"
        if (path / "config.json").exists():
            found[stage] = path
    if not found and required:
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
            raise ValueError(
                f"{path} has no prediction for question_id(s) {missing[:5]}...; it must cover the eval set"
            )
        return [payload[str(r["question_id"])].split("\t----- bird -----\t")[0] for r in records]
    lines = path.read_text().splitlines()
    if len(lines) < len(records):
        raise ValueError(
            f"{path} has {len(lines)} lines but the eval set has {len(records)} questions; "
            f"give one SQL per line, in eval order"
        )
    return [line.split("\t")[0] for line in lines[: len(records)]]


def run_inference(ctx: RunContext) -> dict:
    inf = ctx.config.inference
    records = ctx.records("cold_start", "eval.jsonl")
    if inf.predictions_file:
        preds = [
            {"question_id": r["question_id"], "db_id": r["db_id"], "predictions": sql, "candidates": []}
            for r, sql in zip(records, read_predictions(inf.predictions_file, records))
        ]
        if is_primary():
            (ctx.stage_dir("inference") / "predictions.json").write_text(json.dumps(preds, indent=1))
        return ctx.finish("inference", {"questions": len(records), "policies": [], "source": inf.predictions_file})
    found = policies(ctx, required=not inf.zero_shot)
    chunks = owned_chunks(len(records), PROMPTS_PER_CALL)
    placements: dict = {}
    mine = _predict(ctx, records, found, chunks, placements)
    preds, shares = merge_shares(ctx.stage_dir("inference"), mine, chunks, len(records))
    n_candidates = sum(len(p["candidates"]) for p in preds)
    scorer = (ctx.run_dir / "prm" / "model" / "config.json").exists()
    return ctx.finish(
        "inference",
        {
            "questions": len(records),
            "policies": list(found),
            "zero_shot": inf.zero_shot,
            "candidates_per_question": inf.best_of_n if found else 0,
            "prm_used": scorer,
            "processes": process_count(),
            # each process's share of the host work: its questions and the candidate SQL it executed
            "questions_per_process": [len(share["items"]) for share in shares],
            "sql_executed_per_process": [
                sum(len(p["candidates"]) + len(p.get("sft_candidates", [])) for p in share["items"]) for share in shares
            ],
            "placement": placements,
            "executable_candidate_rate": sum(c["signature"] is not None for p in preds for c in p["candidates"])
            / max(n_candidates, 1),
        },
    )


GREEDY_CALL, SAMPLE_CALL = 32, 16  # a database's questions per sampler call: greedy, and N samples each


def database_runs(indices: list[int], records: list[dict], size: int) -> list[list[int]]:
    """``indices`` cut into runs of at most ``size`` consecutive questions of one database: the prompts of a run
    share the schema, which the sampler then prefills once (``sampling.generate``'s shared prefix)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and len(runs[-1]) < size and records[runs[-1][-1]]["db_id"] == records[i]["db_id"]:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _predict(ctx: RunContext, records, found: dict, chunks: list[int], placements: dict) -> list[dict]:
    """Predictions of the questions in ``chunks``: greedy SQL of every policy, N candidates of the final one
    (executed in this host's SQL pool, PRM-scored), Best-of-N and vote picks; when the final policy is not the
    SFT one, also N executed samples of the SFT policy (``sft_candidates``, for evaluate's headroom block).
    Question i's samples are drawn with their own seed (seed + 1 + i; the SFT policy's seed + 1 + n + i), so
    they do not depend on the process or on the questions beside it. Every model is sharded over this
    process's devices (``host_mesh``); ``placements`` gets where each lives."""
    cfg, inf, tok, pool = ctx.config, ctx.config.inference, ctx.tokenizer(), ctx.pool()
    mine = [i for c in chunks for i in range(c * PROMPTS_PER_CALL, min((c + 1) * PROMPTS_PER_CALL, len(records)))]
    preds = {i: {"question_id": records[i]["question_id"], "db_id": records[i]["db_id"]} for i in mine}
    if inf.zero_shot:
        runs = database_runs(mine, records, GREEDY_CALL)
        for i, answer in zero_shot_answers(ctx, records, runs, placements, GREEDY_CALL).items():
            preds[i].update(answer)
    if not found:  # the zero-shot baseline alone
        return [{**preds[i], "candidates": []} for i in mine]
    final_stage, n = list(found)[-1], len(records)

    def sample(model, first_seed: int, desc: str) -> dict[int, tuple[list[str], list]]:
        """Question -> (its N sampled SQL, their execution results)."""
        out = {}
        for run in tqdm(database_runs(mine, records, SAMPLE_CALL), desc=desc):
            part = [records[i] for i in run]
            texts = generate_sql(
                model,
                tok,
                [r["prompt"] for r in part],
                num_samples=inf.best_of_n,
                temperature=inf.temperature,
                max_new_tokens=inf.max_new_tokens,
                seed=[first_seed + i for i in run],
                prompts_per_call=SAMPLE_CALL,
                progress=False,
            ).texts
            results = iter(_execute(pool, part, texts))
            out.update({i: (sqls, [next(results) for _ in sqls]) for i, sqls in zip(run, texts)})
        return out

    for stage, path in found.items():
        model = load_model(path, cfg.model.dtype, ctx.host_mesh())
        placements[stage] = placement(model)
        for run in tqdm(database_runs(mine, records, GREEDY_CALL), desc=f"greedy ({stage})"):
            greedy = generate_sql(
                model,
                tok,
                [records[i]["prompt"] for i in run],
                max_new_tokens=inf.max_new_tokens,
                prompts_per_call=GREEDY_CALL,
                progress=False,
            )
            for i, texts in zip(run, greedy.texts):
                preds[i][f"greedy_{stage}"] = texts[0]
        if stage == "sft" and final_stage != "sft":
            for i, (sqls, results) in sample(model, cfg.seed + 1 + n, f"samples x{inf.best_of_n} (sft)").items():
                preds[i]["sft_candidates"] = [
                    {"sql": sql, "signature": result_signature(res)} for sql, res in zip(sqls, results)
                ]
    # ``model`` is the final policy: the loop above loaded it last
    prm_path = ctx.run_dir / "prm" / "model"
    scorer = (
        PRMScorer(load_model(prm_path, cfg.model.dtype, ctx.host_mesh()), tok)
        if (prm_path / "config.json").exists()
        else None
    )
    if scorer is not None:
        placements["prm"] = placement(scorer.model)
    sampled = sample(model, cfg.seed + 1, f"best-of-{inf.best_of_n} ({final_stage})")
    for i in tqdm(mine, desc="prm scores", disable=scorer is None):
        (texts, results), p = sampled[i], preds[i]
        scores = scorer.score([records[i]["prompt"]] * len(texts), texts) if scorer else [None] * len(texts)
        cands = [
            {"sql": sql, "signature": result_signature(res), "step_scores": sc}
            for sql, res, sc in zip(texts, results, scores)
        ]
        p["candidates"], p["policy_for_candidates"] = cands, final_stage
        bon = pick_best_of_n(cands, inf.aggregation) if scorer else None
        sc = pick_self_consistency(cands)
        p["best_of_n"] = cands[bon]["sql"] if bon is not None else (texts[0] if scorer else None)
        p["self_consistency"] = cands[sc]["sql"] if sc is not None else texts[0]
    return [preds[i] for i in mine]


def _execute(pool, part, texts) -> list:
    """Execution results of every sample of a chunk, question-major, in this host's SQL pool."""
    return pool.map([(r["db_path"], sql) for r, sqls in zip(part, texts) for sql in sqls])


def merge_shares(out: Path, mine: list[dict], chunks: list[int], n_questions: int) -> tuple[list[dict], list]:
    """Every process's predictions in eval order, written once by the primary to ``predictions.json``, and the
    processes' shares (``{"chunks", "items"}``)."""
    shares = exchange_shares(out, "predictions", {"chunks": chunks, "items": mine})
    merged = in_chunk_order(shares, PROMPTS_PER_CALL, n_questions)
    if is_primary():
        (out / "predictions.json").write_text(json.dumps(merged, indent=1))
    return merged, shares
