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

import dataclasses
import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
from tiny_shapes import tiny_model

from rewardsql_jax.data import MSchemaOptions, m_schema, reward_sql_prompt
from rewardsql_jax.data.builtin import train_bpe_tokenizer
from rewardsql_jax.models.lora import LoRAConfig
from rewardsql_jax.rl import Update
from rewardsql_jax.rl import batches as rl_batches
from rewardsql_jax.rl.algorithms import dpo, rs
from rewardsql_jax.stages.run_config import (
    PRMConfig,
    PRMLabelConfig,
    RLConfig,
    RunConfig,
    SFTConfig,
)
from rewardsql_jax.stages.runner import run_pipeline

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
ONLINE = ("grpo", "grpo_outcome", "grpo_deepseekmath", "reinforce_pp")
OFFLINE = ("dpo", "rs")
MAX_NEW = 40  # new tokens per rollout: the task's CoCTEs are ~30 tokens
BUDGETS = {  # per algorithm: its RL budget with full fine-tuning (seeded; the same for the sign-flipped control)
    "grpo": dict(steps=16, lr=1e-3),
    "grpo_outcome": dict(steps=16, lr=1e-3),
    "grpo_deepseekmath": dict(steps=12, lr=5e-4, kl_beta=0.05),
    "reinforce_pp": dict(steps=16, lr=1e-3, samples_per_prompt=4, kl_beta=0.01),
    "dpo": dict(steps=8, lr=5e-4, algorithm_options={"beta": 0.1}),
    "rs": dict(steps=16, lr=1e-3),
}
# The OR rate each must reach (and at least double the SFT policy's). DPO gets one (best, worst) pair per
# question, 16 pairs here, that differ only in the aggregate: the case where DPO, trained long enough, lowers the
# likelihood of both sides (likelihood displacement; the paper trains DPO 1 epoch at a reduced lr for this
# reason). Measured from 0.20: 0.49-0.59 over five budgets at seed 0 and collapse to ~0 with more steps
# (``reward_chosen`` in the log turns negative); 0.43 at seed 1. So its bar is 0.4, twice its start.
# 2026-12-02 (AMD EPYC, jax 0.10.2): 12 steps sat on the edge of that collapse (seed 0: 0.38, 16 steps 0.00; the
# same at the commit before this session's changes), so the budget is 8 steps, inside the plateau at every seed
# tried: steps 6 / 8 / 10 give 0.49 / 0.55 / 0.57 at seed 0, 0.54 / 0.54 / 0.23 at seed 1; 8 steps 0.57 at seed 2.
MIN_AFTER = {"dpo": 0.4}


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


def learning_base(
    root: Path, *, prm_lora: LoRAConfig | None = None, prm_settings: dict | None = None
) -> tuple[RunConfig, dict, float]:
    """The shared start of the RL learning tests under ``root``: the task's cold start, a 150-step SFT, PRM labels
    by MCTS over the SFT policy's rollouts and a PRM trained on them (with ``prm_lora`` adapters over the SFT policy
    when given; the policy itself is always fully fine-tuned). Returns the run config (its ``stages`` the
    whole chain, its seed ``REWARDSQL_LEARNING_SEED`` or 0), the PRM stage's metrics and the SFT policy's OR rate."""
    cfg = RunConfig(
        name="learning",
        run_dir=str(root),
        seed=int(os.environ.get("REWARDSQL_LEARNING_SEED", "0")),
        workers=1,
        memory_check="off",
        stages=("cold_start", "sft", "prm_labels", "prm", "rl"),
        model=tiny_model(vocab_size=400, hidden_size=64, intermediate_size=128, max_len=512),
        sft=SFTConfig(steps=150, batch_size=16, lr=1e-2, warmup_steps=2),
        prm_labels=PRMLabelConfig(
            num_questions=16, rollouts_per_question=4, completions_per_step=8, search_budget=4, max_new_tokens=MAX_NEW
        ),
        prm=PRMConfig(steps=200, batch_size=16, lr=3e-3, heldout_fraction=0.25),
        rl=RLConfig(prompts_per_step=4, samples_per_prompt=8, max_new_tokens=MAX_NEW, checkpoint_every=100),
    )
    write_cold_start(root, cfg.model.vocab_size)
    run_pipeline(dataclasses.replace(cfg, stages=("sft", "prm_labels")), log=lambda *_: None)
    prm_cfg = dataclasses.replace(
        cfg,
        stages=("prm",),
        model=dataclasses.replace(cfg.model, lora=prm_lora or cfg.model.lora),
        prm=dataclasses.replace(cfg.prm, **(prm_settings or {})),
    )
    prm = run_pipeline(prm_cfg, log=lambda *_: None)["prm"]
    return cfg, prm, sampled_or_rate(root, "sft/policy", max_new_tokens=MAX_NEW)


def rl_or_rate(base, run_dir: Path, algorithm: str, budget: dict, *, lora: LoRAConfig | None = None):
    """The RL stage of ``algorithm`` with ``budget`` (``RLConfig`` fields) on a copy of ``base`` (``learning_base``'s
    result) at ``run_dir``, with ``lora`` adapters over the SFT policy when given; returns the stage's metrics and
    its policy's sampled OR rate."""
    cfg, _, _ = base
    shutil.copytree(cfg.run_dir, run_dir)
    rl = dataclasses.replace(cfg.rl, algorithm=algorithm, **budget)
    model = dataclasses.replace(cfg.model, lora=lora or cfg.model.lora)
    metrics = run_pipeline(
        dataclasses.replace(cfg, run_dir=str(run_dir), stages=("rl",), rl=rl, model=model), log=lambda *_: None
    )["rl"]
    return metrics, sampled_or_rate(run_dir, "rl/policy", max_new_tokens=MAX_NEW)


def flip_advantages(monkeypatch, algorithm: str) -> None:
    """The control: ``algorithm`` learning from the sign-flipped signal. Online algorithms get their advantages (or
    REINFORCE++'s token rewards) negated at the one place they become a train batch; DPO prefers the worse candidate
    of each pair; RS keeps as many candidates as it would, ranked by -R instead of R."""
    if algorithm in ONLINE:
        build = rl_batches.train_batch

        def flipped(ro, upd, **kw):
            if upd.advantages is not None:
                return build(ro, Update(upd.rewards, advantages=-np.asarray(upd.advantages)), **kw)
            return build(ro, Update(upd.rewards, token_values=[-np.asarray(v) for v in upd.token_values]), **kw)

        monkeypatch.setattr(rl_batches, "train_batch", flipped)
        return
    pairs, kept = dpo.dpo_pairs, rs.rs_kept
    monkeypatch.setattr(dpo, "dpo_pairs", lambda cands: [(b, a) for a, b in pairs(cands)])
    monkeypatch.setattr(
        rs, "rs_kept", lambda cands, threshold: sorted(cands, key=lambda c: c["reward"])[: len(kept(cands, threshold))]
    )
