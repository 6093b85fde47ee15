"""Gold SQL -> verified Chain-of-CTEs for the cold-start set (Reward-SQL Sec. 4.1).

The paper prompts LLMs with hand-written examples to rewrite gold SQL as CoCTEs, samples several rewrites
per question, keeps those that execute to the gold result, then drops structurally similar ones with the
syntax-tree edit-distance filter. Here the candidates of a question are the rule-based rewrite
(``sql.to_cocte``), rewrites sampled from a local HF model (``data.cocte_rewriter_path``), or both; a
candidate is *verified* when it is a CoCTE with at least one step (``split_cocte``) and executes to the
gold result (BIRD set rule plus the same column count). Exact duplicates go first, then ``sql.dedup``
keeps ``data.cocte_dedup_keep`` of each question's verified CoCTEs (earlier candidates win ties, so the
rule rewrite is preferred).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rewardsql_jax.data import format_prompt, load_tokenizer
from rewardsql_jax.data.prompts import cocte_rewrite_prompt
from rewardsql_jax.sql import dedup, results_match, split_cocte

STATUSES = ("no_cocte", "error", "wrong_result", "verified")
_FENCE = re.compile(r"```[a-zA-Z]*[ \t]*\n?(.*?)(?:```|$)", re.S)
_WITH = re.compile(r"\bWITH\b", re.I)
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)*")


def _one_block(text: str) -> str:
    """``text`` without blank lines (a blank line separates steps in the policy's layout)."""
    return _BLANK_LINES.sub("\n", text.strip())


def cocte_layout(sql: str) -> str:
    """``sql`` laid out as the policy writes CoCTEs: ``WITH`` + one CTE per block, blocks separated by a
    blank line (``",\\n\\n"`` between CTEs), then the final query. Raises ValueError when ``sql`` is not
    one parseable query with at least one top-level CTE."""
    parsed = split_cocte(sql)
    if not parsed.steps:
        raise ValueError("no top-level CTE: not a Chain-of-CTEs")
    head = "WITH RECURSIVE" if "RECURSIVE" in sql[: parsed.steps[0].start].upper() else "WITH"
    steps = [_one_block(sql[s.start : s.end]) for s in parsed.steps]
    final = _one_block(parsed.final.rstrip().rstrip(";"))
    if not final:
        raise ValueError("no final query after the CTEs")
    return f"{head} " + ",\n\n".join(steps) + "\n\n" + final


def extract_cocte(text: str) -> str | None:
    """The CoCTE in a rewrite completion, in the policy's layout (``cocte_layout``), or None.

    A text that is one CoCTE is taken whole. Otherwise reads a fenced code block when there is one, else the
    text from the first ``WITH``; stops at the first
    ``;`` or at a new prompt block (``【``); when the rest does not parse, trailing blank-line-separated
    blocks (chatter after the query) are dropped until it does.
    """
    if not isinstance(text, str):
        return None
    try:
        return cocte_layout(text)  # already a clean CoCTE (e.g. the rule rewrite)
    except ValueError:
        pass
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start = _WITH.search(body)
    if start is None:
        return None
    body = body[start.start() :]
    for stop in (";", "【", "```"):
        body = body.split(stop)[0]
    blocks = body.strip().split("\n\n")
    for n in range(len(blocks), 0, -1):
        try:
            return cocte_layout("\n\n".join(blocks[:n]))
        except ValueError:
            continue
    return None


@dataclasses.dataclass(frozen=True)
class CoCTESelection:
    """One question's candidates after verification and dedup.

    ``status[i]`` is one of ``STATUSES`` for candidate i (no_cocte: no parseable CoCTE in it; error: does
    not execute; wrong_result: executes to another result; verified); ``kept`` are the verified CoCTEs
    (laid out by ``cocte_layout``) that survive exact-duplicate removal and the tree-edit-distance dedup,
    in candidate order; ``gold_ok`` is False when the gold SQL itself fails (then nothing verifies)."""

    kept: list
    status: list
    gold_ok: bool


def select_coctes(questions, pool, keep: float = 1.0) -> list[CoCTESelection]:
    """Verify and dedup CoCTE candidates: ``questions`` = ``[(db_path, gold_sql, [candidate text, ...])]``.

    Candidates are raw texts (a model completion or a rule rewrite), read with ``extract_cocte``. Every
    gold query and extracted CoCTE runs in one ``pool.map`` call. ``keep`` is ``sql.dedup``'s per-question
    ratio (float in (0, 1]) or count (int).
    """
    extracted = [[extract_cocte(c) for c in cands] for _, _, cands in questions]
    jobs: list[tuple[str, str]] = []
    index: list[int] = []
    for (db, gold, _), texts in zip(questions, extracted):
        index.append(len(jobs))
        jobs.append((db, gold))
        jobs.extend((db, t) for t in texts if t is not None)
    results = pool.map(jobs, progress="cold start: verify CoCTEs") if jobs else []
    out = []
    for texts, start in zip(extracted, index):
        gold, k, status, verified = results[start], start + 1, [], []
        for t in texts:
            if t is None:
                status.append("no_cocte")
                continue
            res, k = results[k], k + 1
            if not res.ok:
                status.append("error")
            elif gold.ok and len(res.columns) == len(gold.columns) and results_match(res, gold, "bird"):
                status.append("verified")
                if t not in verified:
                    verified.append(t)
            else:
                status.append("wrong_result")
        out.append(CoCTESelection(kept=dedup(verified, keep) if verified else [], status=status, gold_ok=gold.ok))
    return out


def sample_rewrites(ctx, examples, schema_of) -> tuple[list, int]:
    """``data.cocte_rewrite_samples`` completions per example from the model at ``data.cocte_rewriter_path``
    (its own tokenizer) for ``cocte_rewrite_prompt``; plus the number of questions whose prompt did not fit
    the model (they get no samples). ``schema_of(example)`` is the example's M-Schema text."""
    from .generation import generate_sql  # jax-side imports only when a model rewrites
    from .policy import load_model

    d = ctx.config.data
    if not d.cocte_rewriter_path:
        raise ValueError(
            f"data.cocte_rewriter={d.cocte_rewriter!r} needs data.cocte_rewriter_path (a local HF "
            f"checkpoint dir of the rewriting model), or use data.cocte_rewriter='rule'"
        )
    path = Path(d.cocte_rewriter_path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"data.cocte_rewriter_path={str(path)!r} is not a HF checkpoint directory (no "
            f"config.json); point it at a local model saved with save_pretrained, or use "
            f"data.cocte_rewriter='rule'"
        )
    tok = load_tokenizer(path)
    model = load_model(path, ctx.config.model, ctx.host_mesh())
    prompts = [
        format_prompt(
            tok,
            cocte_rewrite_prompt(schema_of(ex), ex.question, ex.gold_sql, ex.evidence),
            chat_template=d.cocte_rewriter_chat_template,
        )
        for ex in examples
    ]
    budget = model.config.max_position_embeddings - d.cocte_rewrite_max_new_tokens
    fit = [i for i, p in enumerate(prompts) if len(tok(p, add_special_tokens=False).input_ids) <= budget]
    done = (
        generate_sql(
            model,
            tok,
            [prompts[i] for i in fit],
            num_samples=d.cocte_rewrite_samples,
            temperature=d.cocte_rewrite_temperature,
            max_new_tokens=d.cocte_rewrite_max_new_tokens,
            seed=ctx.config.seed + 11,
            desc="cold start: model CoCTE rewrites",
        )
        if fit
        else None
    )
    texts: list[list[str]] = [[] for _ in examples]
    for i, t in zip(fit, done.texts if done else []):
        texts[i] = t
    return texts, len(examples) - len(fit)


__all__ = ["CoCTESelection", "STATUSES", "cocte_layout", "extract_cocte", "sample_rewrites", "select_coctes"]
