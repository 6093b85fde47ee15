"""The built-in default's real data as token ids, generated as the cold_start stage does (raw Reward-SQL M-Schema
prompts, rule CoCTE targets): what benchmarks/pretrained_135m.py and shared_prompts.py run on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from rewardsql_jax.data import MSchemaOptions, m_schema, reward_sql_prompt
from rewardsql_jax.data.builtin.generate import make_builtin_splits
from rewardsql_jax.sql.cocte_checks import table_columns
from rewardsql_jax.stages.cold_start import rule_cocte
from rewardsql_jax.training.collate import encode_pair


@dataclasses.dataclass(frozen=True)
class DefaultData:
    sft: list  # (ids, loss_mask) of every SFT example (prompt + target + EOS), as the SFT stage encodes them
    sft_keys: list  # each SFT example's database (prefix groups)
    rl_prompts: list  # token ids of the RL questions' prompts that fit model.max_len with rl.max_new_tokens
    rl_targets: list  # token ids (+ EOS) of those questions' CoCTE targets (completions of the GRPO rows)
    rl_keys: list
    eval_prompts: list  # token ids of the held-out test prompts (what inference samples)


def default_data(cfg, tok, root: Path) -> DefaultData:
    """The cold_start stage's data for ``cfg`` (configs/default.py): the generated benchmark, raw M-Schema prompts,
    rule CoCTE targets (the stage also verifies them by execution; an unverified one is kept here)."""
    d = cfg.data
    splits = make_builtin_splits(
        root,
        seed=cfg.seed,
        n_train_dbs=d.n_train_dbs,
        n_test_dbs=d.n_test_dbs,
        questions_per_db=d.questions_per_db,
        rename_test_schemas=d.rename_test_schemas,
        rl_questions_per_db=d.rl_questions_per_db,
        scrambled_train_dbs=d.scrambled_train_dbs,
    )
    options = MSchemaOptions(example_num=d.schema_examples)
    schemas, columns = {}, {}

    def prompt(ex) -> str:
        if ex.db_path not in schemas:
            schemas[ex.db_path] = m_schema(ex.db_path, db_id=ex.db_id, options=options)
        return reward_sql_prompt(schemas[ex.db_path], ex.question, ex.evidence)

    def target(ex) -> str:
        if ex.db_path not in columns:
            columns[ex.db_path] = table_columns(ex.db_path)
        return rule_cocte(ex.gold_sql, columns[ex.db_path])[0] or ex.gold_sql

    def ids(text: str) -> list:
        return tok(text, add_special_tokens=False).input_ids

    sft = [(encode_pair(tok, prompt(ex), target(ex)), ex.db_id) for ex in splits.train.examples]
    sft = [(e, k) for e, k in sft if len(e[0]) <= cfg.model.max_len]
    rl_examples = (splits.rl or splits.train).examples
    budget = cfg.model.max_len - cfg.rl.max_new_tokens
    rl = [(ids(prompt(ex)), ids(target(ex)) + [tok.eos_token_id], ex.db_id) for ex in rl_examples]
    rl = [r for r in rl if len(r[0]) <= budget]
    return DefaultData(
        sft=[e for e, _ in sft],
        sft_keys=[k for _, k in sft],
        rl_prompts=[r[0] for r in rl],
        rl_targets=[r[1] for r in rl],
        rl_keys=[r[2] for r in rl],
        eval_prompts=[ids(prompt(ex)) for ex in splits.test.examples],
    )


def spread(n_items: int, n: int) -> list[int]:
    """``n`` distinct indices spread evenly over ``range(n_items)`` (so every database is represented)."""
    if n > n_items:
        raise SystemExit(f"asked for {n} items of {n_items}")
    return sorted({int(round(x)) for x in np.linspace(0, n_items - 1, n)})


def lengths(rows) -> str:
    n = [len(r) for r in rows]
    return f"{min(n)}-{max(n)} tokens (mean {np.mean(n):.0f})"


def left_pad(prompts, pad: int):
    """(input_ids, attention_mask) torch tensors, left-padded as transformers recommends for generation."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    return ids, attn
