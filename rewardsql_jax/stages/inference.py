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
import dataclasses
import functools
import json
from pathlib import Path

from rewardsql_jax.distributed import is_primary, process_count
from rewardsql_jax.rewards.prm_scoring import PRMScorer, aggregate_steps
from rewardsql_jax.sampling.inputs import PROMPTS_PER_CALL

from .context import RunContext
from .generation import generate_sql
from .part_log import PartLog, resumed_runs
from .policy import lazy_model
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
    ``inference.best_of_n=0``: greedy SQL alone, no candidates.
    Question i's samples are drawn with their own seed (seed + 1 + i; the SFT policy's seed + 1 + n + i), so
    they do not depend on the process or on the questions beside it. Each part is kept under ``inference/parts``
    as each database run finishes (``PartLog``): a rerun of the stage continues where it stopped. Every model is
    sharded over this process's devices (``host_mesh``); ``placements`` gets where each was loaded."""
    cfg, inf = ctx.config, ctx.config.inference
    parts = _Parts(ctx, records, ctx.stage_dir("inference") / "parts")
    mine = [i for c in chunks for i in range(c * PROMPTS_PER_CALL, min((c + 1) * PROMPTS_PER_CALL, len(records)))]
    preds = {i: {"question_id": records[i]["question_id"], "db_id": records[i]["db_id"]} for i in mine}
    if inf.zero_shot:
        runs = database_runs(mine, records, GREEDY_CALL)
        for i, answer in zero_shot_answers(ctx, records, runs, placements, GREEDY_CALL, parts.folder).items():
            preds[i].update(answer)
    if not found:  # the zero-shot baseline alone
        return [{**preds[i], "candidates": []} for i in mine]
    final_stage = list(found)[-1]
    greedy_runs, sample_runs = database_runs(mine, records, GREEDY_CALL), database_runs(mine, records, SAMPLE_CALL)
    for stage, path in found.items():
        model = lazy_model(ctx, path, stage, placements)
        for i, sql in parts.greedy(model, stage, greedy_runs).items():
            preds[i][f"greedy_{stage}"] = sql
        if stage == "sft" and final_stage != "sft" and inf.best_of_n:
            for i, cands in parts.samples(model, stage, cfg.seed + 1 + len(records), sample_runs).items():
                preds[i]["sft_candidates"] = cands
    if not inf.best_of_n:
        return [{**preds[i], "candidates": []} for i in mine]
    # ``model`` is the final policy: the loop above made it last
    sampled = parts.samples(model, final_stage, cfg.seed + 1, sample_runs)
    prm_path = ctx.run_dir / "prm" / "model"
    scores = None
    if (prm_path / "config.json").exists():
        scorer = lazy_model(ctx, prm_path, "prm", placements)
        scores = parts.prm_scores(scorer, sampled, final_stage, cfg.seed + 1, sample_runs)
    for i in mine:
        preds[i].update(_picks(sampled[i], None if scores is None else scores[i], final_stage, inf.aggregation))
    return [preds[i] for i in mine]


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The parts of the inference stage for one process's questions, each decoded (or scored) one database run
    at a time and kept in ``folder`` by a ``PartLog`` keyed by what it depends on (a rerun resumes)."""

    ctx: RunContext
    records: list[dict]
    folder: Path

    def greedy(self, model, stage: str, runs: list[list[int]]) -> dict[int, str]:
        """Question -> the greedy SQL of ``stage``'s policy (``model()`` loads it)."""
        inf, tok = self.ctx.config.inference, self.ctx.tokenizer()

        def decode(run: list[int]) -> dict[int, str]:
            texts = generate_sql(
                model(),
                tok,
                [self.records[i]["prompt"] for i in run],
                max_new_tokens=inf.max_new_tokens,
                prompts_per_call=GREEDY_CALL,
                progress=False,
            ).texts
            return {i: t[0] for i, t in zip(run, texts)}

        log = PartLog(self.folder, f"greedy_{stage}", decoding_key(self.ctx, stage, GREEDY_CALL), self.records)
        return resumed_runs(log, runs, decode, f"greedy ({stage})")

    def samples(self, model, stage: str, first_seed: int, runs: list[list[int]]) -> dict[int, list[dict]]:
        """Question -> ``inference.best_of_n`` SQL sampled from ``stage``'s policy (question i with seed
        ``first_seed + i``), each with its execution result signature (``{"sql", "signature"}``)."""
        inf, tok, pool = self.ctx.config.inference, self.ctx.tokenizer(), self.ctx.pool()

        def draw(run: list[int]) -> dict[int, list[dict]]:
            part = [self.records[i] for i in run]
            texts = generate_sql(
                model(),
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
            return {
                i: [{"sql": sql, "signature": result_signature(next(results))} for sql in sqls]
                for i, sqls in zip(run, texts)
            }

        log = PartLog(self.folder, f"samples_{stage}", self.samples_key(stage, first_seed), self.records)
        return resumed_runs(log, runs, draw, f"samples x{inf.best_of_n} ({stage})")

    def samples_key(self, stage: str, first_seed: int) -> dict:
        """What ``samples`` depend on: the policy and decoding, N, the temperature and the seeds."""
        inf = self.ctx.config.inference
        return {
            **decoding_key(self.ctx, stage, SAMPLE_CALL),
            "n": inf.best_of_n,
            "temperature": inf.temperature,
            "first_seed": first_seed,
        }

    def prm_scores(self, model, sampled: dict, stage: str, first_seed: int, runs: list[list[int]]) -> dict[int, list]:
        """Question -> the PRM's step scores of each of its ``sampled`` candidates (``samples(stage, first_seed)``)."""
        tok = self.ctx.tokenizer()
        scorer = functools.cache(lambda: PRMScorer(model(), tok))

        def score(run: list[int]) -> dict[int, list]:
            return {
                i: scorer().score([self.records[i]["prompt"]] * len(sampled[i]), [c["sql"] for c in sampled[i]])
                for i in run
            }

        key = {"prm": finished_at(self.ctx, "prm"), **self.samples_key(stage, first_seed)}
        return resumed_runs(PartLog(self.folder, "prm_scores", key, self.records), runs, score, "prm scores")


def _picks(sampled: list[dict], scores: list | None, stage: str, aggregation: str) -> dict:
    """A question's candidates (its samples with their PRM step scores, ``None`` without a PRM) and the
    Best-of-N (PRM; the first candidate when none executes; ``None`` without a PRM) and self-consistency picks."""
    cands = [{**c, "step_scores": sc} for c, sc in zip(sampled, scores or [None] * len(sampled))]
    bon = pick_best_of_n(cands, aggregation) if scores is not None else None
    vote = pick_self_consistency(cands)
    return {
        "candidates": cands,
        "policy_for_candidates": stage,
        "best_of_n": cands[bon]["sql"] if bon is not None else (cands[0]["sql"] if scores is not None else None),
        "self_consistency": cands[vote]["sql"] if vote is not None else cands[0]["sql"],
    }


def decoding_key(ctx: RunContext, stage: str, prompts_per_call: int) -> dict:
    """What a trained policy's decoded SQL depends on besides the prompts: the policy (its stage and when that stage
    finished), the token budget and how many prompts are decoded together (the padding of a batch)."""
    return {
        "policy": stage,
        "trained": finished_at(ctx, stage),
        "max_new_tokens": ctx.config.inference.max_new_tokens,
        "prompts_per_call": prompts_per_call,
    }


def finished_at(ctx: RunContext, stage: str) -> str | None:
    """When ``stage`` finished (its metrics' ``finished_at``), ``None`` when it has not."""
    return ctx.metrics(stage).get("finished_at") if ctx.is_done(stage) else None


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
