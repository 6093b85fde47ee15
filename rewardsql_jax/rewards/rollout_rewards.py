"""Rewards of a batch of RL rollouts, mapped onto the generated tokens (host side, numpy).

Three reward sources, one per algorithm family of the RL stage:

* outcome (Reward-SQL Sec. 5.1, OR): 1 when the completion executes to the gold result under the BIRD rule
  (``set(pred_rows) == set(gold_rows)``), else 0; a non-executable completion gets 0;
* process (Reward-SQL Sec. 5.1/5.3, PR): PRM step scores, turned into step advantages by
  ``rewards.process_advantages`` and broadcast to every token of their step (variant "released": the released
  code's token rewards and advantages, token for token, ``process_token_advantages``);
* clause (EXPO-SQL Sec. 3.2 Eqs. 1-3, Eq. 4): ``sql.clause_rewards`` per completion, every token of a clause
  carrying that clause's reward.

Token alignment. The sampler returns token ids; the text that is executed and PRM-scored is
``decode(ids without EOS).strip()`` (as ``stages.generation`` decodes). Re-tokenising that text need not
give back the sampled ids (a sampled tokenisation may be non-canonical), so ``decode_with_offsets`` takes each
token's char span from the ids themselves: the lengths of the single-token decodes when they concatenate to
the full text (byte-level BPE), otherwise of the decodes of every prefix (a character split over tokens,
SentencePiece's leading spaces), shifted by the stripped leading whitespace. The EOS token gets the span of
the last character, so it carries the value of the step / clause it ends.

Steps are the response's "\\n\\n"-separated blocks (``token_align.blank_line_spans``), exactly the blocks
the PRM scores (``models.prm_head.format_prm_input``); for a well-formed Chain-of-CTEs they are its CTE steps
plus the final SELECT (DESIGN.md output format), and unlike ``split_cocte`` they exist for any text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from sqlglot.errors import SqlglotError

from ..sql.clause_rewards import ClauseRewards, RewardOptions, clause_rewards
from ..sql.compare import exec_match_batch, results_match
from ..sql.execute import ExecResult
from .advantages import group_advantages
from .process import process_advantages, released_advantages, released_rewards
from .token_align import blank_line_spans, clause_token_values, released_step_anchors, spans_to_token_values


@dataclasses.dataclass(frozen=True)
class DecodedCompletion:
    """``text``: the stripped decoded completion; ``offsets`` [T, 2]: char span in ``text`` of each sampled
    token (EOS included), so ``offsets[k]`` describes ``token_ids[k]``."""

    text: str
    offsets: np.ndarray


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """Per completion: ``rewards`` [N] float32 OR in {0, 1}; ``executable`` [N] bool; ``gold_ok`` [N] bool (a
    failing gold query makes the question unusable: OR 0 and no clause rewards)."""

    rewards: np.ndarray
    executable: np.ndarray
    gold_ok: np.ndarray
    results: tuple  # (pred ExecResult, gold ExecResult) per completion


def decode_with_offsets(tokenizer, token_ids: Sequence[int], eos_ids: Sequence[int]) -> DecodedCompletion:
    """Decode sampled ids to the stripped text plus each token's char span in it (module docstring)."""
    eos = set(int(e) for e in eos_ids)
    ids = [int(t) for t in token_ids]
    body = [t for t in ids if t not in eos]
    full = tokenizer.decode(body, skip_special_tokens=True) if body else ""
    text = full.strip()
    lead = len(full) - len(full.lstrip())
    ends = _token_ends(tokenizer, body, full)
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    body_spans = (
        np.clip(np.stack([starts, ends], axis=1) - lead, 0, len(text)) if len(ends) else np.zeros((0, 2), np.int64)
    )
    last = (max(len(text) - 1, 0), len(text))
    out, k = [], 0
    for t in ids:
        if t in eos:
            out.append(last)
        else:
            out.append(tuple(body_spans[k]))
            k += 1
    return DecodedCompletion(text=text, offsets=np.asarray(out, np.int64).reshape(-1, 2))


def _token_ends(tokenizer, body: list, full: str) -> np.ndarray:
    """End char of each token in ``full``: from single-token decodes when they concatenate to ``full`` (O(T)),
    else from decoding every prefix (O(T^2); needed for a character split over tokens, SentencePiece spaces)."""
    if not body:
        return np.zeros(0, np.int64)
    pieces = tokenizer.batch_decode([[t] for t in body], skip_special_tokens=True)
    if "".join(pieces) != full:
        pieces = tokenizer.batch_decode([body[: k + 1] for k in range(len(body))], skip_special_tokens=True)
        return np.maximum.accumulate(np.asarray([len(p) for p in pieces], np.int64))
    return np.cumsum(np.asarray([len(p) for p in pieces], np.int64))


def clause_reward_options(mode: str) -> RewardOptions:
    """EXPO-SQL reward constants with the result-match rule of the run's EX rule: the BIRD set rule, or for
    Spider's rule (bag equality, row order when the gold orders) ``ordered_bag``."""
    _check_ex_mode(mode)
    return RewardOptions(match="bird" if mode == "bird" else "ordered_bag")


def _check_ex_mode(mode: str) -> None:
    if mode not in ("bird", "spider"):
        raise ValueError(f"EX rule {mode!r}: use 'bird' or 'spider' (data.ex_mode)")


def execution_outcomes(
    pool, dbs: Sequence[str], preds: Sequence[str], golds: Sequence[str], *, timeout_s: float = 30.0, mode: str = "bird"
) -> Outcomes:
    """OR of every completion (Reward-SQL Sec. 5.1) under the EX rule ``mode`` of the evaluation (``bird``: set
    equality; ``spider``: the test-suite ``exec_match`` rule): predictions and gold queries in one ``pool.map``
    (gold queries repeat within a group; the pool runs each distinct job once). A database file that does not
    exist raises ``FileNotFoundError``: every query on it would fail, and RL would train on zero rewards."""
    if not len(dbs) == len(preds) == len(golds):
        raise ValueError(
            f"dbs ({len(dbs)}), preds ({len(preds)}) and golds ({len(golds)}) need one entry per completion"
        )
    _check_ex_mode(mode)
    missing = sorted({str(d) for d in dbs if not Path(d).is_file()})
    if missing:
        raise FileNotFoundError(
            f"database file(s) not found: {missing[:3]}{' ...' if len(missing) > 3 else ''}; "
            f"the rewards would all be 0. Check the dataset location (data.root) or rerun "
            f"the cold_start stage"
        )
    n = len(preds)
    res = pool.map([(d, p) for d, p in zip(dbs, preds)] + [(d, g) for d, g in zip(dbs, golds)], timeout_s=timeout_s)
    pred, gold = res[:n], res[n:]
    if mode == "bird":
        match = [results_match(p, g, "bird") for p, g in zip(pred, gold)]
    else:
        match = exec_match_batch(list(zip(dbs, preds, golds)), mode="spider", timeout_s=timeout_s, pool=pool)
    return Outcomes(
        rewards=np.asarray(match, np.float32),
        executable=np.asarray([p.ok for p in pred], bool),
        gold_ok=np.asarray([g.ok for g in gold], bool),
        results=tuple(zip(pred, gold)),
    )


def pool_execute_fn(pool, known: dict | None = None) -> Callable[..., ExecResult]:
    """An ``execute``-compatible function running through ``pool`` (sandboxed workers, result cache), answering
    ``known[(db, sql)]`` results without executing again."""
    known = known or {}

    def run(db, sql, *, timeout_s: float = 30.0, max_rows: int | None = None) -> ExecResult:
        hit = known.get((str(db), sql))
        if hit is not None:
            return hit
        return pool.map([(db, sql)], timeout_s=timeout_s, max_rows=max_rows)[0]

    return run


def batch_clause_rewards(
    pool, dbs, preds, golds, outcomes: Outcomes, *, timeout_s: float = 30.0, options: RewardOptions = RewardOptions()
) -> list[ClauseRewards | None]:
    """EXPO-SQL clause rewards (Sec. 3.2, Eqs. 1-3) per completion, reusing the executions of ``outcomes``;
    incremental clause-wise executions go through ``pool``. None where the gold query failed or the
    predicted text cannot be split into clauses (no SQL tokens at all)."""
    known = {(str(d), p): r[0] for d, p, r in zip(dbs, preds, outcomes.results)}
    known.update({(str(d), g): r[1] for d, g, r in zip(dbs, golds, outcomes.results)})
    run = pool_execute_fn(pool, known)
    out: list[ClauseRewards | None] = []
    for d, p, g, (_, gold), ok in zip(dbs, preds, golds, outcomes.results, outcomes.gold_ok):
        if not ok:
            out.append(None)
            continue
        try:
            out.append(clause_rewards(d, p, g, timeout_s=timeout_s, options=options, gold_result=gold, execute_fn=run))
        except (ValueError, SqlglotError):
            out.append(None)
    return out


def clause_token_rewards(
    completion: DecodedCompletion,
    rewards: ClauseRewards | None,
    *,
    options: RewardOptions = RewardOptions(),
    gold_ok: bool = True,
) -> np.ndarray:
    """[T] token rewards of one completion (EXPO-SQL Eq. 4: each token carries its clause's reward r_c).

    A completion with no clauses (empty, or text the clause splitter rejects) is the execution-error case with
    the whole text as the erroneous clause: every token gets ``options.error_erroneous``. Tokens between
    clauses (separating whitespace) get 0. A question whose gold fails gives 0 everywhere (no signal).
    """
    n = len(completion.offsets)
    if not gold_ok:
        return np.zeros(n, np.float32)
    if rewards is None or not rewards.clauses:
        return np.full(n, options.error_erroneous, np.float32)
    return clause_token_values(completion.offsets, rewards.clauses)


def align_step_scores(completion: DecodedCompletion, scores: Sequence[float]) -> np.ndarray:
    """One score per "\\n\\n" block of the text. The PRM scores exactly these blocks; should a completion
    contain the PRM's tag token itself the counts can differ: extra scores are dropped, missing blocks
    repeat the last score (0.0 when the PRM returned none)."""
    k = len(blank_line_spans(completion.text))
    s = [float(x) for x in scores][:k]
    return np.asarray(s + [s[-1] if s else 0.0] * (k - len(s)), np.float32)


def step_token_values(completion: DecodedCompletion, step_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """[T]: every token of step j carries ``step_values[j]`` (Reward-SQL Sec. 5.3, A_i^j on step j's tokens)."""
    spans = blank_line_spans(completion.text)
    if len(step_values) != len(spans):
        raise ValueError(f"{len(step_values)} step values for {len(spans)} steps; align them with align_step_scores")
    return spans_to_token_values(completion.offsets, [(s, e, v) for (s, e), v in zip(spans, step_values)])


def outcome_advantages(outcomes, group_size: int) -> np.ndarray:
    """[N] per-sequence GRPO advantages of OR alone: group z-scores (Bessel, +1e-4, TRL defaults)."""
    return np.asarray(group_advantages(np.asarray(outcomes, np.float32), group_size), np.float32)


def process_token_advantages(
    completions: Sequence[DecodedCompletion],
    step_scores: Sequence[Sequence[float]],
    outcomes,
    group_size: int,
    *,
    variant: str = "paper",
    rm_coef: float = 1.0,
) -> list[np.ndarray]:
    """Per-token advantages [T_i] from PRM step scores and OR (Reward-SQL Sec. 5.3, variant "paper" |
    "released"; "deepseekmath": appendix A.3.1, outcomes unused). Scores are first aligned to the blocks.

    "paper" / "deepseekmath": every token of block j (its closing "\\n\\n" included) carries A_ij.
    "released": the released RewardSQL verl code token for token (``process.released_rewards`` /
    ``released_advantages``): block j's score sits on the token holding its last char
    (``token_align.released_step_anchors``) and fills backwards, so the "\\n\\n" tokens after it carry block
    j+1's value; ``rm_coef`` weights the PRM (this variant only, ignored by the others; 0: the outcome on the
    last token only, and the advantage is nonzero only there)."""
    aligned = [align_step_scores(c, s) for c, s in zip(completions, step_scores)]
    if variant == "released":
        out = np.asarray(outcomes, np.float64).reshape(-1)
        if len(out) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(out)} outcomes: give one per completion")
        rewards = [
            released_rewards(s, released_step_anchors(c.text, c.offsets), len(c.offsets), o, rm_coef)
            for c, s, o in zip(completions, aligned, out)
        ]
        return released_advantages(rewards, group_size)
    step_adv = process_advantages(aligned, outcomes, group_size, variant=variant)
    return [step_token_values(c, a) for c, a in zip(completions, step_adv)]


def outcome_only_released_advantages(
    completions: Sequence[DecodedCompletion], outcomes, group_size: int
) -> list[np.ndarray]:
    """``process_token_advantages(..., variant="released", rm_coef=0)`` without step scores (it reads none): the
    outcome on each response's last token, z-scored in the group as the released trainer does."""
    out = np.asarray(outcomes, np.float64).reshape(-1)
    if len(out) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(out)} outcomes: give one per completion")
    rewards = [released_rewards([], [], len(c.offsets), o, 0.0) for c, o in zip(completions, out)]
    return released_advantages(rewards, group_size)


def process_reward(step_scores: Sequence[float]) -> float:
    """PR(C) = mean step score (Reward-SQL Sec. 5.1); 0 for a completion with no scored step."""
    return float(np.mean(step_scores)) if len(step_scores) else 0.0
