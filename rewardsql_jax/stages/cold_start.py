"""Stage 1 — cold-start data (Reward-SQL Sec. 4.1): prompts in M-Schema format, gold SQL rewritten to
verified Chain-of-CTEs, tree-edit-distance dedup, and (for a model trained from scratch) a BPE tokenizer.

Artefacts in ``run_dir/cold_start/``: ``train.jsonl`` / ``eval.jsonl`` (one record per question: ids,
db path, prompt, gold SQL, CoCTE target, difficulty), ``tokenizer/``, ``metrics.json`` (conversion counts).
A rewrite is *verified* when it executes to the same result as the gold query (BIRD set rule plus the
same column count); unverified questions keep the gold SQL as target, so nothing is silently dropped.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tqdm.auto import tqdm

from rewardsql_jax.data import MSchemaOptions, load_bird, load_spider, m_schema, reward_sql_prompt
from rewardsql_jax.data.builtin import make_builtin_benchmark, train_bpe_tokenizer
from rewardsql_jax.sql import dedup, results_match
from rewardsql_jax.sql.to_cocte import convert_to_cocte

from .context import RunContext


def load_benchmarks(ctx: RunContext):
    """(train, eval) ``Benchmark``s for the configured data source."""
    d = ctx.config.data
    if d.source == "builtin":
        return make_builtin_benchmark(ctx.stage_dir("cold_start") / "data", seed=ctx.config.seed,
                                      n_train_dbs=d.n_train_dbs, n_test_dbs=d.n_test_dbs,
                                      questions_per_db=d.questions_per_db,
                                      rename_test_schemas=d.rename_test_schemas)
    root = Path(d.root)
    if not root.exists():
        raise FileNotFoundError(f"data.root={root} does not exist; download the dataset and point data.root at it")
    if d.source == "spider":  # splits are question files relative to root (e.g. ../spider_syn/train_spider.json)
        load = lambda split: load_spider(root, questions=split)  # noqa: E731
    else:
        load = lambda split: load_bird(root, split=split)  # noqa: E731
    return (load(d.train_split) if d.train_split else None), load(d.eval_split)


def _limit(examples, n, seed: int = 0):
    """All examples, or a seeded random subset of ``n`` in their original order (covers every database)."""
    examples = list(examples)
    if not n or n >= len(examples):
        return examples
    keep = sorted(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))
    return [examples[i] for i in keep]


def verified_cocte(sql: str, db_path: str, pool) -> tuple[str, bool, bool]:
    """(target, converted without fallback, verified by execution) for one gold query."""
    try:
        conv = convert_to_cocte(sql)
    except ValueError:
        return sql, False, False
    gold, pred = pool.map([(db_path, sql), (db_path, conv.sql)])
    ok = gold.ok and pred.ok and len(gold.columns) == len(pred.columns) and results_match(pred, gold, "bird")
    return (conv.sql if ok else sql), not conv.fallback, ok


def _record(ex, prompt: str, target: str) -> dict:
    return {"question_id": ex.question_id, "db_id": ex.db_id, "db_path": str(ex.db_path), "question": ex.question,
            "evidence": ex.evidence, "difficulty": ex.difficulty, "gold_sql": ex.gold_sql, "prompt": prompt,
            "target": target}


def write_jsonl(path: Path, records) -> None:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_cold_start(ctx: RunContext) -> dict:
    """Build the cold-start SFT set and the eval set; train a tokenizer when the model has none."""
    cfg, out = ctx.config, ctx.stage_dir("cold_start")
    train, evaluation = load_benchmarks(ctx)
    options = MSchemaOptions(example_num=cfg.data.schema_examples)
    schemas: dict[str, str] = {}

    def prompt_of(ex):
        if ex.db_path not in schemas:
            schemas[ex.db_path] = m_schema(ex.db_path, db_id=ex.db_id, options=options)
        return reward_sql_prompt(schemas[ex.db_path], ex.question, ex.evidence)

    pool, records, n_structured, n_verified = ctx.pool(), [], 0, 0
    train_examples = _limit(train.examples, cfg.data.max_train, cfg.seed) if train is not None else []
    for ex in tqdm(train_examples, desc="cold start: gold -> CoCTE"):
        target, structured, verified = verified_cocte(ex.gold_sql, ex.db_path, pool)
        n_structured += structured
        n_verified += verified
        records.append(_record(ex, prompt_of(ex), target))
    # One rule-based rewrite per question here; dedup keeps all of them (it matters when several
    # LLM-written CoCTEs exist per question, see sql.dedup).
    by_question = {r["question_id"]: [r["target"]] for r in records}
    kept = {q: dedup(c, keep=1.0) for q, c in by_question.items()}
    assert all(len(k) == 1 for k in kept.values())
    eval_records = [_record(ex, prompt_of(ex), ex.gold_sql) for ex in _limit(evaluation.examples, cfg.data.max_eval, cfg.seed)]
    write_jsonl(out / "train.jsonl", records)
    write_jsonl(out / "eval.jsonl", eval_records)
    tok_dir = _tokenizer(ctx, records, out / "tokenizer")
    return ctx.finish("cold_start", {
        "train_questions": len(records), "eval_questions": len(eval_records),
        "cocte_structured": n_structured, "cocte_verified": n_verified,
        "cocte_verified_rate": n_verified / max(len(records), 1), "tokenizer": str(tok_dir)})


def _tokenizer(ctx: RunContext, records, tok_dir: Path) -> Path | None:
    from transformers import AutoTokenizer

    m = ctx.config.model
    source = m.tokenizer_path or m.path
    if source:
        AutoTokenizer.from_pretrained(source).save_pretrained(tok_dir)
    elif not records:
        return None  # evaluation of a predictions file needs no tokenizer
    else:
        texts = [r["prompt"] + r["target"] for r in records]
        train_bpe_tokenizer(texts, m.vocab_size, tok_dir)
    return tok_dir
