"""A small generated task on which RL must learn from reward alone (the RL learning tests' task).

One SQLite table of item prices; each question asks for one aggregate of the prices (highest, lowest, total,
how many), in several phrasings. The cold-start SFT set gives every question four Chain-of-CTE targets that
differ only in the aggregate of the final SELECT, one of them right, so the briefly SFT-ed policy writes
well-formed, executable CoCTEs whose aggregate is right about a quarter of the time. Only the execution reward
(or the PRM, trained on labels from executing the policy's rollouts) says which aggregate a question asks for,
so a rising OR rate on these questions is learning from reward, and a policy trained with the advantages'
sign flipped must get worse, not better.

``write_cold_start`` writes what the ``cold_start`` stage would (``train.jsonl``, ``eval.jsonl``, a BPE
tokenizer, ``metrics.json``), so the real ``sft`` / ``prm_labels`` / ``prm`` / ``rl`` stages run on it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from rewardsql_jax.data import MSchemaOptions, m_schema, reward_sql_prompt
from rewardsql_jax.data.builtin import train_bpe_tokenizer

AGGREGATES = ("MAX", "MIN", "SUM", "COUNT")
QUESTIONS = (
    "What is the highest price of the items?",
    "Show the largest item price.",
    "Find the maximum price among all items.",
    "Which price is the top one?",
    "Give the price of the most expensive item.",
    "What is the biggest price in the shop?",
    "Tell me the highest item price.",
    "List the maximum of the prices.",
    "What does the priciest item cost?",
    "Report the peak price of the items.",
    "Return the greatest price.",
    "How much is the dearest item?",
    "Find the top price among the items.",
    "What is the largest price on record?",
    "Show the highest of all prices.",
    "Which item price is the maximum?",
)
PRICES = (3, 8, 15, 22, 40, 57)


def cocte(aggregate: str) -> str:
    """The two-step Chain-of-CTEs answer that uses ``aggregate``."""
    return f"WITH priced AS (SELECT price FROM items WHERE price > 0)\n\nSELECT {aggregate}(price) FROM priced"


def write_database(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (item_id INTEGER PRIMARY KEY, price INTEGER)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", list(enumerate(PRICES, start=1)))
    return path


def write_cold_start(run_dir: Path, vocab_size: int) -> list[dict]:
    """The ``cold_start`` stage's artefacts for this task under ``run_dir``; returns the train records."""
    out = Path(run_dir) / "cold_start"
    db = write_database(out / "data" / "shop" / "shop.sqlite").resolve()
    prompt_schema = m_schema(db, db_id="shop", options=MSchemaOptions(example_num=0))
    records = []
    gold = cocte("MAX")
    targets = [cocte(a) for a in AGGREGATES]
    for q in QUESTIONS:
        records.append(
            {
                "question_id": len(records),
                "db_id": "shop",
                "db_path": str(db),
                "question": q,
                "evidence": "",
                "difficulty": "simple",
                "gold_sql": gold,
                "prompt": reward_sql_prompt(prompt_schema, q, ""),
                "target": gold,
                "targets": targets,
            }
        )
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (out / "train.jsonl").write_text(lines)
    (out / "eval.jsonl").write_text(lines)
    train_bpe_tokenizer([r["prompt"] + t for r in records for t in r["targets"]], vocab_size, out / "tokenizer")
    (out / "metrics.json").write_text(
        json.dumps(
            {
                "stage": "cold_start",
                "train_questions": len(records),
                "task": "aggregate choice (tests/stages/learning_task.py)",
            }
        )
    )
    return records


def sampled_or_rate(
    run_dir: Path, policy: str, *, samples: int = 16, seed: int = 2026, max_new_tokens: int = 40, workers: int = 1
) -> float:
    """Share of ``samples`` completions per task question (T = 1.0, the RL temperature) of the HF policy at
    ``run_dir/policy`` that execute to the gold result (the RL stage's OR, through its rollout functions)."""
    from rewardsql_jax.data.tokenizer import load_tokenizer
    from rewardsql_jax.models import from_pretrained
    from rewardsql_jax.rl import sample_rollouts, score_rows
    from rewardsql_jax.sql import ExecutorPool

    run_dir = Path(run_dir)
    tok = load_tokenizer(run_dir / "cold_start" / "tokenizer")
    records = [json.loads(line) for line in (run_dir / "cold_start" / "train.jsonl").read_text().splitlines()]
    ids = [tok(r["prompt"], add_special_tokens=False).input_ids for r in records]
    with ExecutorPool(workers=workers) as pool:
        ro = sample_rollouts(
            from_pretrained(run_dir / policy),
            tok,
            records,
            ids,
            samples=samples,
            temperature=1.0,
            max_new_tokens=max_new_tokens,
            seed=seed,
            prompts_per_call=len(records),
            host_fn=lambda recs, toks: score_rows(tok, pool, recs, toks, clauses=False),
        )
    return float(ro.outcomes.rewards.mean())
