"""Stage 3 — PRM step labels by OmegaPRM-style Monte-Carlo search (Reward-SQL Sec. 4.2, appendix A.2).

For ``prm_labels.num_questions`` training questions (a seeded choice) the SFT policy samples
``rollouts_per_question`` Chain-of-CTEs at ``temperature``; each response is cut into steps, the blocks the
PRM tags (``format_prm_input``: one step per "\\n\\n"-separated block); a response that parses as a
CoCTE is first laid out canonically from ``split_cocte`` (one block per CTE, then the final query), so a
policy that forgets the blank lines still gets one step per CTE. ``search.omega_prm`` then labels the
steps: ``k = completions_per_step`` completions of ``prompt + prefix`` estimate MC(prefix), a binary search
finds each selected rollout's first wrong step, Q/U selection with ``c_puct / alpha / beta / length_scale``
(L in tokens) picks what to search next, ``search_budget`` iterations per question. All questions search
in lock-step, so every round is one sampler call per chunk of ``PROMPTS_PER_CALL`` questions (seeded by the
chunk and the round) and one ``ExecutorPool.map``. On a pod each process labels its own chunks
(``stages.shares``) on its own devices, and the labels equal one process's.
A completion is correct when it executes to the gold result (BIRD rule, ``results_match``).

Rollouts that do not parse as SQL are kept and searched like the others (``unparseable="search"``): their
blocks are still steps, and MC from each prefix is well defined; ``"negative"`` labels every step 0
without search, ``"drop"`` discards them. Rule filtering drops empty responses and exact duplicates
before the search; after it, per question, labelled responses with the same syntax tree (identifiers and
literals included: formatting-only differences) are merged, and ``dedup_keep < 1`` additionally keeps only
that share of the parseable ones, the most structurally diverse (``sql.dedup``, Sec. 4.1's filter).
``unparseable`` and ``dedup_keep`` are read from ``config.prm_labels`` when it has them (defaults "search", 1.0).

Writes ``prm_labels/labels.jsonl``: {question_id, db_path, prompt, response, step_labels, first_wrong,
source, parseable}; ``response`` joins the steps with "\\n\\n" so ``format_prm_input`` puts one tag per label.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary
from rewardsql_jax.models.sharding import placement
from rewardsql_jax.sampling.inputs import PROMPTS_PER_CALL
from rewardsql_jax.search.omega_prm import (
    LabelledRollout,
    OmegaPRMConfig,
    Rollout,
    omega_prm_search,
    run_searches,
    step_labels,
)
from rewardsql_jax.sql import dedup, distance_matrix, results_match, split_cocte

from .cold_start import write_jsonl
from .context import RunContext
from .generation import generate_sql
from .policy import load_model
from .shares import exchange_shares, in_chunk_order, owned_chunks

STEP_SEPARATOR = "\n\n"
UNPARSEABLE = ("search", "negative", "drop")


def raw_steps(text: str) -> tuple:
    """The non-empty, stripped "\\n\\n"-separated blocks of ``text`` (the PRM's steps)."""
    return tuple(b.strip() for b in text.split(STEP_SEPARATOR) if b.strip())


def response_steps(text: str) -> tuple[tuple, bool]:
    """(steps, parseable) of a sampled response; a parseable CoCTE gets one block per CTE + the final query."""
    text = text.strip()
    if not text:
        return (), False
    try:
        cocte = split_cocte(text)
    except ValueError:
        return raw_steps(text), False
    if not cocte.steps:
        return raw_steps(text), True
    head = text[: cocte.steps[0].start]  # "WITH " / "WITH RECURSIVE " (and leading comments)
    blocks = [text[s.start : s.end] + ("," if i + 1 < len(cocte.steps) else "") for i, s in enumerate(cocte.steps)]
    blocks = [head + blocks[0]] + blocks[1:] + [cocte.final]
    if any(STEP_SEPARATOR in b for b in blocks) or not all(b.strip() for b in blocks):
        return raw_steps(text), True  # a blank line inside a step: keep the policy's own layout
    return tuple(b.strip() for b in blocks), True


def steps_text(steps) -> str:
    return STEP_SEPARATOR.join(steps)


def continued_steps(prefix: tuple, continuation: str) -> tuple:
    """The steps of ``prefix`` continued by ``continuation``, the text sampled right after the prefix's last step:
    the blocks after the prefix. When the policy does not start a new step (it extends the last one), the
    continuation becomes a step of its own, so the steps still start with the prefix; the SQL that is judged
    differs from the sampled text only by the whitespace of that break."""
    full = raw_steps(steps_text(prefix) + continuation)
    if full[: len(prefix)] == tuple(prefix):
        return full
    return tuple(prefix) + raw_steps(continuation)


def merge_near_duplicates(texts, parseable, *, keep: float = 1.0) -> list[int]:
    """Indices kept by the per-question similarity filter: among parseable texts, later ones with the same
    syntax tree (values included: distance 0) as a kept one are dropped; with ``keep < 1`` only that share
    of the parseable survivors, the most diverse, stays (``sql.dedup``). Unparseable texts are all kept."""
    idx = [i for i, p in enumerate(parseable) if p]
    kept = set(i for i, p in enumerate(parseable) if not p)
    if idx:
        dist = distance_matrix([texts[i] for i in idx], values=True)
        survivors = [a for n, a in enumerate(idx) if all(dist[n, m] > 0.0 for m in range(n))]
        if keep < 1.0 and len(survivors) > 1:
            chosen = set(dedup([texts[i] for i in survivors], keep, values=True))
            survivors = [i for i in survivors if texts[i] in chosen]
        kept.update(survivors)
    return sorted(kept)


@dataclasses.dataclass(frozen=True)
class QuestionRollouts:
    """One question's filtered rollouts: steps, parseability, and the counts of what filtering removed."""

    rollouts: tuple
    parseable: dict
    empty: int
    duplicates: int
    unparseable: int


def filter_rollouts(texts, unparseable: str) -> QuestionRollouts:
    """Rule filtering before the search: drop empty responses and exact duplicates (after step layout)."""
    if unparseable not in UNPARSEABLE:
        raise ValueError(f"prm_labels.unparseable={unparseable!r}; choose one of {list(UNPARSEABLE)}")
    out, parse, empty, dups, bad = [], {}, 0, 0, 0
    for text in texts:
        steps, ok = response_steps(text)
        if not steps:
            empty += 1
            continue
        if steps in parse:
            dups += 1
            continue
        bad += not ok
        if not ok and unparseable == "drop":
            continue
        parse[steps] = ok
        out.append(steps)
    return QuestionRollouts(tuple(out), parse, empty, dups, bad)


class _Executor:
    """Judges step tuples of many questions in one pool call per round (BIRD EX against the gold)."""

    def __init__(self, pool, records):
        self.pool, self.calls = pool, len(records)
        gold = pool.map([(r["db_path"], r["gold_sql"]) for r in records])
        self.gold = {r["question_id"]: g for r, g in zip(records, gold)}

    def judge(self, items):
        """items: [(record, steps)] -> [bool]."""
        self.calls += len(items)
        results = self.pool.map([(r["db_path"], steps_text(s)) for r, s in items])
        return [results_match(res, self.gold[r["question_id"]], "bird") for (r, _), res in zip(items, results)]


def chunk_seed(seed: int, chunk: int, round_: int) -> int:
    """The sampler seed of one chunk's ``round_`` (0: its rollouts; r >= 1: its r-th MC round): it depends on the
    chunk alone, so a chunk's labels are the same whichever process, and beside whichever chunks, it runs."""
    return seed + 7 + 1_000_003 * chunk + 1000 * round_


def _padded_generate(model, tok, prompts, *, k, cfg, seed):
    """``k`` samples of each of at most ``PROMPTS_PER_CALL`` prompts in one sampler call of the fixed shape."""
    out = generate_sql(
        model,
        tok,
        prompts + [prompts[-1]] * (PROMPTS_PER_CALL - len(prompts)),
        num_samples=k,
        temperature=cfg.temperature,
        max_new_tokens=cfg.max_new_tokens,
        seed=seed,
        prompts_per_call=PROMPTS_PER_CALL,
        progress=False,
    )
    return out.texts[: len(prompts)]


def _answer_batch(model, tok, cfg, seed, executor, chosen, chunk_of, counter, bar):
    """``run_searches`` callback: complete every requested prefix (one sampler call per chunk, seeded by the
    chunk and the round), judge all completions in one pool call."""

    def answer(items):
        counter["rounds"] += 1
        asked, items = items, sorted(items, key=lambda item: item[0])
        texts = []
        for c in sorted({chunk_of[i] for i, _ in items}):
            part = [(i, r) for i, r in items if chunk_of[i] == c]
            # The prompt ends with the prefix's last step, not with the separator after it: the policy writes
            # the "\n\n" itself, tokenised as in its training targets (a BPE can tokenise a trailing "\n\n" as
            # a token that never precedes a next step, and the completions would then be noise).
            prompts = [chosen[i]["prompt"] + steps_text(r.prefix) for i, r in part]
            texts += _padded_generate(
                model, tok, prompts, k=part[0][1].k, cfg=cfg, seed=chunk_seed(seed, c, counter["rounds"])
            )
        fulls = [[continued_steps(r.prefix, t) for t in ts] for (_, r), ts in zip(items, texts)]
        verdicts = iter(executor.judge([(chosen[i], f) for (i, _), fs in zip(items, fulls) for f in fs]))
        bar.update(1)
        bar.set_postfix(requests=len(items))
        by_search = {i: [Rollout(f, next(verdicts)) for f in fs] for (i, _), fs in zip(items, fulls)}
        return [by_search[i] for i, _ in asked]

    return answer


def _parses(text: str) -> bool:
    try:
        split_cocte(text)
        return True
    except ValueError:
        return False


def _records(ctx, record, labelled, parseable, keep):
    texts = [steps_text(r.steps) for r in labelled]
    flags = [parseable[r.steps] if r.steps in parseable else _parses(t) for r, t in zip(labelled, texts)]
    return [
        {
            "question_id": record["question_id"],
            "db_path": ctx.stored_path(record["db_path"]),
            "prompt": record["prompt"],
            "response": texts[i],
            "step_labels": list(labelled[i].labels),
            "first_wrong": labelled[i].first_wrong,
            "source": labelled[i].source,
            "parseable": flags[i],
        }
        for i in merge_near_duplicates(texts, flags, keep=keep)
    ]


def run_prm_labels(ctx: RunContext) -> dict:
    cfg, out, t0 = ctx.config.prm_labels, ctx.stage_dir("prm_labels"), time.perf_counter()
    tok = ctx.tokenizer()
    train = ctx.records("cold_start", "train.jsonl")
    rng = np.random.default_rng(ctx.config.seed)
    chosen = [train[i] for i in rng.choice(len(train), size=min(cfg.num_questions, len(train)), replace=False)]
    # a database's questions side by side: a sampler call's prompts then share its schema, prefilled once
    chosen.sort(key=lambda r: r["db_id"])
    chunks = owned_chunks(len(chosen), PROMPTS_PER_CALL)
    model = load_model(ctx.require("sft", "policy"), ctx.config.model, ctx.host_mesh())
    per_question, stats = _label_share(ctx, model, tok, chosen, chunks)
    shares = exchange_shares(out, "labels", {"chunks": chunks, "items": per_question, "stats": stats})
    records = [rec for recs in in_chunk_order(shares, PROMPTS_PER_CALL, len(chosen)) for rec in recs]
    if is_primary():
        write_jsonl(out / "labels.jsonl", records)
    barrier("prm_labels.py")
    share_stats = [share["stats"] for share in shares]
    totals = {k: sum(st[k] for st in share_stats) for k in share_stats[0] if k != "generation_rounds"}
    sources = collections.Counter(rec["source"] for rec in records)
    labels = [y for rec in records for y in rec["step_labels"]]
    return ctx.finish(
        "prm_labels",
        {
            "questions": len(chosen),
            "rollouts_sampled": totals["rollouts_sampled"],
            "rollouts_empty": totals["rollouts_empty"],
            "rollouts_duplicate": totals["rollouts_duplicate"],
            "rollouts_unparseable": totals["rollouts_unparseable"],
            "unparseable_policy": cfg.unparseable,
            "labelled_rollouts": len(records),
            "dropped_near_duplicates": totals["candidates"] - len(records),
            "sources": dict(sources),
            "steps": len(labels),
            "positive_steps": int(sum(labels)),
            "negative_steps": len(labels) - int(sum(labels)),
            "mc_evaluations": totals["mc_evaluations"],
            "completions": totals["completions"],
            "search_iterations": totals["search_iterations"],
            "generation_rounds": max(st["generation_rounds"] for st in share_stats),
            "db_calls": totals["db_calls"],
            # the host work of each process: its questions and the SQL it executed
            "questions_per_process": [st["questions"] for st in share_stats],
            "db_calls_per_process": [st["db_calls"] for st in share_stats],
            "policy_placement": placement(model),
            "seconds": time.perf_counter() - t0,
        },
    )


def _label_share(ctx: RunContext, model, tok, chosen: list, chunks: list[int]) -> tuple[list, dict]:
    """This process's share: the labelled records of each question in ``chunks`` (a list per question, chunk
    order) and its counts. Every chunk is sampled with its own seeds (``chunk_seed``)."""
    cfg, seed = ctx.config.prm_labels, ctx.config.seed
    unparseable, keep = cfg.unparseable, float(cfg.dedup_keep)
    mine = [(c, i) for c in chunks for i in range(c * PROMPTS_PER_CALL, min((c + 1) * PROMPTS_PER_CALL, len(chosen)))]
    questions, chunk_of = [chosen[i] for _, i in mine], [c for c, _ in mine]
    sampled = []
    for c in chunks:
        part = [q["prompt"] for q, qc in zip(questions, chunk_of) if qc == c]
        sampled += _padded_generate(model, tok, part, k=cfg.rollouts_per_question, cfg=cfg, seed=chunk_seed(seed, c, 0))
    executor = _Executor(ctx.pool(), questions)
    filtered = [filter_rollouts(texts, unparseable) for texts in sampled]
    search_cfg = OmegaPRMConfig(
        completions_per_step=cfg.completions_per_step,
        c_puct=cfg.c_puct,
        alpha=cfg.alpha,
        beta=cfg.beta,
        length_scale=cfg.length_scale,
        search_budget=cfg.search_budget,
    )

    def n_tokens(steps):
        return len(tok(steps_text(steps), add_special_tokens=False).input_ids)

    searched = [[s for s in f.rollouts if unparseable == "search" or f.parseable[s]] for f in filtered]
    verdicts = iter(executor.judge([(r, s) for r, ss in zip(questions, searched) for s in ss]))
    counter = {"rounds": 0}
    searches = [
        omega_prm_search([Rollout(s, next(verdicts)) for s in ss], search_cfg, length_fn=n_tokens) for ss in searched
    ]
    with tqdm(desc="prm labels: MC rounds", unit="round") as bar:
        answer = _answer_batch(model, tok, cfg, seed, executor, questions, chunk_of, counter, bar)
        results = run_searches(searches, answer)
    per_question, candidates = [], 0
    for r, f, res in zip(questions, filtered, results):
        negatives = [
            LabelledRollout(s, step_labels(len(s), 0), 0, "unparseable")
            for s in f.rollouts
            if unparseable == "negative" and not f.parseable[s]
        ]
        candidates += len(res.labelled) + len(negatives)
        per_question.append(_records(ctx, r, list(res.labelled) + negatives, f.parseable, keep))
    stats = {
        "questions": len(questions),
        "rollouts_sampled": sum(len(t) for t in sampled),
        "rollouts_empty": sum(f.empty for f in filtered),
        "rollouts_duplicate": sum(f.duplicates for f in filtered),
        "rollouts_unparseable": sum(f.unparseable for f in filtered),
        "candidates": candidates,
        "mc_evaluations": sum(res.mc_evaluations for res in results),
        "completions": sum(res.completions for res in results),
        "search_iterations": sum(res.iterations for res in results),
        "generation_rounds": counter["rounds"],
        "db_calls": executor.calls,
    }
    return per_question, stats
