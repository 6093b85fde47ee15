"""The zero-shot baseline (``inference.zero_shot``): the pretrained instruct model ``model.path``, untrained, asked
through its chat template for one SQLite query per eval question, its SQL read out of the reply (``extract_sql``)."""

from __future__ import annotations

from tqdm.auto import tqdm

from rewardsql_jax.data import format_prompt
from rewardsql_jax.models.sharding import placement
from rewardsql_jax.sql.extract import extract_sql

from .context import RunContext
from .generation import generate_sql
from .policy import load_model

ZERO_SHOT_INSTRUCTION = "Answer with one SQLite query only, in a ```sql code block."


def zero_shot_prompt(tokenizer, prompt: str) -> str:
    """The eval ``prompt`` (raw Reward-SQL M-Schema prompt) with ``ZERO_SHOT_INSTRUCTION`` appended, as the user
    turn of ``tokenizer``'s chat template, ending with the assistant's generation prompt."""
    return format_prompt(tokenizer, f"{prompt.rstrip()}\n{ZERO_SHOT_INSTRUCTION}", chat_template=True)


def zero_shot_answers(
    ctx: RunContext, records: list[dict], runs: list[list[int]], placements: dict, prompts_per_call: int
) -> dict:
    """Question index -> ``{"zero_shot": sql, "zero_shot_reply": reply}`` for the questions of ``runs`` (groups
    decoded together), greedy with ``inference.max_new_tokens``; ``placements["zero_shot"]``: where the model
    lives."""
    cfg, tok = ctx.config, ctx.tokenizer()
    model = load_model(cfg.model.path, cfg.model.dtype, ctx.host_mesh())
    placements["zero_shot"] = placement(model)
    out = {}
    for run in tqdm(runs, desc="greedy (zero-shot)"):
        replies = generate_sql(
            model,
            tok,
            [zero_shot_prompt(tok, records[i]["prompt"]) for i in run],
            max_new_tokens=cfg.inference.max_new_tokens,
            prompts_per_call=prompts_per_call,
            progress=False,
        ).texts
        for i, texts in zip(run, replies):
            out[i] = {"zero_shot": extract_sql(texts[0]), "zero_shot_reply": texts[0]}
    return out
