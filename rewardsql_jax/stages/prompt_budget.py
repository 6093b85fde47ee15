"""Cold start's prompts and what they cost: each question's M-Schema prompt (cached per database, wrapped in the chat
template with ``data.chat_template``, fitted into ``data.max_prompt_tokens`` when it is set: ``data/prompt_fit.py``),
and the report of their token lengths and of what fitting cut, per split."""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Any

import numpy as np

from rewardsql_jax.data import MSchemaOptions, format_prompt, load_tokenizer, read_db_schema, reward_sql_prompt
from rewardsql_jax.data.prompt_fit import FittedPrompt, first_tables, fit_prompt
from rewardsql_jax.data.schema import render_m_schema

from .run_config import RunConfig


class Prompts:
    """``prompts(example) -> FittedPrompt`` for the run's questions. Without a budget the prompt is the full schema
    (``tokens`` is then 0: not counted here).

    With a budget, a database's schema is fitted once, for the longest question ``reserve`` saw on it, and every
    question of that database shows the same schema text: the shared prefix the sampler, the SFT and PRM steps
    compute once per database. (Fitted per question, a large database's prompts differed in their example values
    and shared a few dozen tokens: a prefix-grouped Spider SFT batch then padded every row to ~2,000 "rest"
    tokens.)"""

    def __init__(self, config: RunConfig):
        d, m = config.data, config.model
        self.options = MSchemaOptions(example_num=d.schema_examples)
        self.budget = d.max_prompt_tokens
        source = m.tokenizer_path or m.path
        self.tokenizer: Any = load_tokenizer(source) if (d.chat_template or self.budget) else None
        self.chat_template = d.chat_template
        self._schemas: dict = {}
        self._texts: dict = {}
        self._longest: dict = {}  # db path -> (question tokens, example): what its schema is fitted for
        self._fits: dict = {}  # db path -> FittedPrompt of its longest question
        self._fitted_texts: dict = {}  # db path -> the schema text of that fit

    def _schema(self, db_path: str):
        if db_path not in self._schemas:
            self._schemas[db_path] = read_db_schema(db_path, example_rows=max(5, self.options.example_num))
        return self._schemas[db_path]

    def schema_text(self, ex) -> str:
        """The full M-Schema text of ``ex``'s database (what every prompt shows without a budget)."""
        if ex.db_path not in self._texts:
            self._texts[ex.db_path] = render_m_schema(ex.db_id, self._schema(ex.db_path), options=self.options)
        return self._texts[ex.db_path]

    def _build(self, ex, schema_text: str) -> str:
        text = reward_sql_prompt(schema_text, ex.question, ex.evidence)
        return format_prompt(self.tokenizer, text, chat_template=True) if self.chat_template else text

    def count(self, text: str) -> int:
        """Tokens of ``text`` as the stages encode prompts (no special tokens added)."""
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def reserve(self, examples) -> None:
        """Note each database's longest question (in tokens, with its evidence) among ``examples``: the one its
        schema will be fitted for. Call it with every split's questions before the first prompt."""
        if not self.budget:
            return
        for ex in examples:
            n = self.count(self._build(ex, "-"))  # the prompt around a one-character schema
            if ex.db_path not in self._longest or n > self._longest[ex.db_path][0]:
                self._longest[ex.db_path] = (n, ex)
                self._fits.pop(ex.db_path, None)
                self._fitted_texts.pop(ex.db_path, None)

    def __call__(self, ex) -> FittedPrompt:
        if not self.budget:
            return FittedPrompt(self._build(ex, self.schema_text(ex)), 0, self.options.example_num, (), True)
        if ex.db_path not in self._longest:  # not reserved: fitted for the first question asked
            self.reserve([ex])
        if ex.db_path not in self._fits:
            longest = self._longest[ex.db_path][1]
            self._fits[ex.db_path] = fit_prompt(
                longest.db_id,
                self._schema(ex.db_path),
                lambda text: self._build(longest, text),
                self.count,
                self.budget,
                self.options,
            )
        fit = self._fits[ex.db_path]
        if ex.db_path not in self._fitted_texts:  # rendered once per database, not per question
            schema = self._schema(ex.db_path)
            kept = first_tables(schema, len(schema.tables) - len(fit.tables_cut)) if fit.tables_cut else schema
            options = replace(self.options, example_num=fit.example_num)
            self._fitted_texts[ex.db_path] = render_m_schema(ex.db_id, kept, options=options)
        prompt = self._build(ex, self._fitted_texts[ex.db_path])
        tokens = self.count(prompt)
        if tokens <= self.budget:
            return FittedPrompt(prompt, tokens, fit.example_num, fit.tables_cut, True)
        # longer than the question the database was fitted for (not reserved): fitted for this one alone
        return fit_prompt(
            ex.db_id, self._schema(ex.db_path), lambda t: self._build(ex, t), self.count, self.budget, self.options
        )


def length_summary(lengths) -> dict | None:
    """``{"n", "min", "median", "p90", "p99", "max"}`` of token lengths (None for an empty split)."""
    if not len(lengths):
        return None
    a = np.asarray(lengths, np.float64)
    q = np.percentile(a, [50, 90, 99])
    return {
        "n": int(a.size),
        "min": int(a.min()),
        "median": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": int(a.max()),
    }


def fit_summary(records: list[dict], fitted: list[FittedPrompt], example_num: int) -> dict:
    """What fitting did to one split: prompts with fewer example values, with tables left out, still over the budget
    (kept), and per database the fewest examples shown and the most tables left out."""
    databases: dict = collections.defaultdict(lambda: {"example_num": example_num, "tables_cut": []})
    for r, f in zip(records, fitted):
        if f.example_num < example_num or f.tables_cut or not f.fits:
            db = databases[r["db_id"]]
            db["example_num"] = min(db["example_num"], f.example_num)
            db["tables_cut"] = max(db["tables_cut"], list(f.tables_cut), key=len)
            db["over_budget"] = db.get("over_budget", 0) + (not f.fits)
    return {
        "prompts": len(fitted),
        "fewer_examples": sum(f.example_num < example_num for f in fitted),
        "tables_cut": sum(bool(f.tables_cut) for f in fitted),
        "over_budget": sum(not f.fits for f in fitted),
        "databases": dict(sorted(databases.items())),
    }


def prompt_report(config: RunConfig, tokenizer, splits: dict, fitted: dict) -> dict:
    """Cold start's prompt metrics: ``prompt_tokens`` (the length distribution of each split's prompts with the
    policy ``tokenizer``), ``prompts_over_generation_budget`` (prompts longer than ``model.max_len`` minus the
    stage's ``max_new_tokens``: eval -> inference, rl / train -> rl) and, with ``data.max_prompt_tokens``,
    ``prompt_fit`` (``fit_summary`` of each split)."""
    m = config.model
    room = {"eval": m.max_len - config.inference.max_new_tokens, "rl": m.max_len - config.rl.max_new_tokens}
    lengths = {
        name: [len(tokenizer(r["prompt"], add_special_tokens=False).input_ids) for r in records]
        for name, records in splits.items()
    }
    over = {
        name: {"limit": room.get(name, room["rl"]), "prompts": sum(n > room.get(name, room["rl"]) for n in lens)}
        for name, lens in lengths.items()
    }
    out = {
        "prompt_tokens": {name: length_summary(lens) for name, lens in lengths.items()},
        "prompts_over_generation_budget": over,
        "max_prompt_tokens": config.data.max_prompt_tokens,
    }
    if config.data.max_prompt_tokens:
        out["prompt_fit"] = {
            name: fit_summary(splits[name], fitted[name], config.data.schema_examples) for name in splits
        }
    return out
