"""The zero-shot baseline (``inference.zero_shot``): the pretrained instruct model ``model.path``, untrained, asked
through its chat template for one SQLite query per eval question, its SQL read out of the reply (``extract_sql``).

The assistant's reply is begun for it with an opening ```sql fence and ``SELECT`` (``ZERO_SHOT_REPLY_START``, as
the prompts of Codex-era zero-shot text-to-SQL end in ``SELECT``) and decoding stops at the closing fence. Begun with
the fence alone, SmolLM2-135M-Instruct copied the schema as CREATE TABLE statements on Spider dev (the first 34
questions: every reply); with ``SELECT`` it writes queries. Stopping at the fence, a batch does not decode the
explanations an instruct model appends after its code block."""

from __future__ import annotations

from pathlib import Path

from rewardsql_jax.data import format_prompt
from rewardsql_jax.sql.extract import extract_sql

from .context import RunContext
from .generation import generate_sql
from .part_log import PartLog, resumed_runs
from .policy import lazy_model

ZERO_SHOT_INSTRUCTION = "Answer with one SQLite query only, in a ```sql code block."
ZERO_SHOT_REPLY_START = "```sql\nSELECT"
FENCE = "```"


def zero_shot_prompt(tokenizer, prompt: str) -> str:
    """The eval ``prompt`` (raw Reward-SQL M-Schema prompt) with ``ZERO_SHOT_INSTRUCTION`` appended, as the user
    turn of ``tokenizer``'s chat template, then the assistant's generation prompt and ``ZERO_SHOT_REPLY_START``."""
    return format_prompt(tokenizer, f"{prompt.rstrip()}\n{ZERO_SHOT_INSTRUCTION}", chat_template=True) + (
        ZERO_SHOT_REPLY_START
    )


def fence_token_ids(tokenizer) -> tuple[int, ...]:
    """Ids of the vocabulary tokens holding a code fence (for SmolLM2 "```" and " ```"): after the primed opening
    fence, the first of them closes the query."""
    return tuple(sorted(i for t, i in tokenizer.get_vocab().items() if FENCE in t))


def zero_shot_answers(
    ctx: RunContext, records: list[dict], runs: list[list[int]], placements: dict, prompts_per_call: int, parts: Path
) -> dict:
    """Question index -> ``{"zero_shot": sql, "zero_shot_reply": reply}`` for the questions of ``runs`` (groups
    decoded together), greedy with ``inference.max_new_tokens``, kept in ``parts`` as each run finishes (a rerun
    decodes only the runs not there yet: ``PartLog``); ``placements["zero_shot"]``: where the model lives, when it
    was loaded."""
    cfg, tok = ctx.config, ctx.tokenizer()
    key = {
        "model": cfg.model.path,
        "max_new_tokens": cfg.inference.max_new_tokens,
        "prompts_per_call": prompts_per_call,
    }
    fences = fence_token_ids(tok)

    model = lazy_model(ctx, cfg.model.path, "zero_shot", placements)

    def decode(run: list[int]) -> dict:
        completions = generate_sql(
            model(),
            tok,
            [zero_shot_prompt(tok, records[i]["prompt"]) for i in run],
            max_new_tokens=cfg.inference.max_new_tokens,
            prompts_per_call=prompts_per_call,
            progress=False,
            stop_token_ids=fences,
        )
        out = {}
        for i, ids in zip(run, completions.token_ids):
            # decoded here, not stripped (``Completions.texts``): the reply goes on from "SELECT" mid-line
            reply = ZERO_SHOT_REPLY_START + tok.decode(ids[0], skip_special_tokens=True)
            out[i] = {"zero_shot": extract_sql(reply), "zero_shot_reply": reply}
        return out

    return resumed_runs(PartLog(parts, "zero_shot", key, records), runs, decode, "greedy (zero-shot)")
