"""Reward-SQL process (step-level) advantages from PRM step scores and outcome rewards (host side, numpy).

Three variants, all over contiguous groups of `group_size` responses to one prompt:
  paper:        Reward-SQL Sec. 5.1 + 5.3. R_i = mean_j s_ij + o_i; A_i = (R_i - mean_g) / (std_g + eps);
                A_ij = A_i * s_ij if A_i > 0 else A_i * (1 - s_ij).
  released:     the authors' released verl code (DESIGN.md; ``released_rewards`` + ``released_advantages``).
                Token rewards r_t: rm_coef * s_ij filled backwards from step j's anchor (its last token) over
                the tokens up to it, plus o_i on every token; with rm_coef = 0, o_i on the last token only.
                R_i = mean of the *distinct* nonzero r_t; A_i = z-score of R_i in the group;
                A_t = (r_t - 1) A_i if A_i > 0 and r_t > 1; r_t A_i if A_i > 0; (1 - r_t) A_i if A_i <= 0;
                and A_t = 0 wherever r_t = 0. Here the "tokens" are the steps (one anchor each); token for
                token, with the separator placement, is ``rollout_rewards.process_token_advantages``.
  deepseekmath: DeepSeekMath process supervision (Shao et al. 2024, Sec. 4.1.3; Reward-SQL appendix A.3.1).
                s~_ij = (s_ij - mean(R_g)) / (std(R_g) + eps) over all step scores R_g of the group;
                A_ij = sum_{j' >= j} s~_ij' (return-to-go over steps). Outcomes are not used (the formula has none).
Std uses Bessel's correction (ddof=1) and eps=1e-6 by default; both are options.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .advantages import group_zscore

PROCESS_VARIANTS = ("paper", "released", "deepseekmath")


def _as_steps(step_scores, outcomes, group_size):
    steps = [np.asarray(s, np.float64).reshape(-1) for s in step_scores]
    out = np.asarray(outcomes, np.float64).reshape(-1)
    if len(steps) != out.shape[0]:
        raise ValueError(
            f"step_scores has {len(steps)} responses but outcomes has {out.shape[0]}; give one outcome per response."
        )
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}.")
    if len(steps) % group_size != 0:
        raise ValueError(
            f"{len(steps)} responses is not a multiple of group_size={group_size}; "
            f"pass all completions of every prompt, grouped contiguously."
        )
    return steps, out


def _paper(steps, out, g, eps, ddof):
    pr = np.array([s.mean() if s.size else 0.0 for s in steps])
    a = group_zscore((pr + out).reshape(-1, g), eps=eps, ddof=ddof, xp=np).reshape(-1)
    return [ai * s if ai > 0 else ai * (1.0 - s) for ai, s in zip(a, steps)]


def released_rewards(step_scores, anchors, length: int, outcome: float, rm_coef: float = 1.0) -> np.ndarray:
    """[length] float64 token rewards of one response as the released RewardSQL reward manager builds them
    (``verl/workers/reward_manager/custom.py`` on the PRM worker's ``rm_scores``).

    ``rm_coef * step_scores[j]`` is placed at token ``anchors[j]`` (-1: nowhere; a later step sharing an
    anchor overwrites it); each nonzero placed value then fills backwards over the tokens after the previous
    nonzero one up to itself (a zero score is skipped, so its tokens take the next nonzero step's value;
    tokens after the last nonzero anchor stay 0), and the outcome is added to every token. With
    ``rm_coef == 0`` no PRM value is placed and the outcome sits on the last token only (the shipped
    ``grpo_trainer.yaml``)."""
    scores = np.asarray(step_scores, np.float64).reshape(-1)
    anchors = np.asarray(anchors, np.int64).reshape(-1)
    if rm_coef < 0:
        raise ValueError(f"rm_coef={rm_coef}: the PRM weight must be >= 0")
    if scores.shape != anchors.shape:
        raise ValueError(f"{scores.size} step scores but {anchors.size} anchors: pass one anchor per step")
    if anchors.size and anchors.max() >= length:
        raise ValueError(f"anchor {int(anchors.max())} is past the last of {length} tokens")
    r = np.zeros(length, np.float64)
    if length == 0:
        return r
    if rm_coef == 0:
        r[-1] = outcome
        return r
    for a, v in zip(anchors, scores):
        if a >= 0:
            r[a] = rm_coef * v
    nz = np.nonzero(r)[0]
    filled = np.zeros(length, np.float64)
    if nz.size:
        owner = np.searchsorted(nz, np.arange(nz[-1] + 1))  # first nonzero anchor at or after each token
        filled[: nz[-1] + 1] = r[nz[owner]]
    return filled + outcome


def released_advantages(
    token_rewards: Sequence[np.ndarray], group_size: int, *, eps: float = 1e-6, ddof: int = 1
) -> list[np.ndarray]:
    """Per-token advantages of the released ``compute_grpo_process_advantage_avg_unique`` (RewardSQL's verl
    ``trainer/ppo/core_algos.py``) over contiguous groups of ``group_size`` responses.

    R_i = mean of the distinct nonzero values of ``token_rewards[i]`` (0 if none); A_i = (R_i - mean_g) /
    (std_g + eps) (Bessel by default); token t gets (r_t - 1) A_i if A_i > 0 and r_t > 1, r_t A_i if A_i > 0,
    (1 - r_t) A_i if A_i <= 0, and 0 where r_t = 0. Deliberate difference: a group whose R_i are all equal
    gets exactly 0, where the released float32 mean of equal values can be off by an ulp, which divided by
    (0 + 1e-6) gives advantages of up to ~0.1 in either direction (a group of one response is all-equal: 0,
    as in the released code). Returns float32 arrays.
    """
    rewards = [np.asarray(r, np.float64).reshape(-1) for r in token_rewards]
    if not isinstance(group_size, int) or group_size < 1 or len(rewards) % group_size:
        raise ValueError(
            f"{len(rewards)} responses in groups of group_size={group_size!r}: pass all completions "
            f"of every prompt, grouped contiguously."
        )
    resp = np.asarray([np.unique(r[r != 0]).mean() if np.any(r != 0) else 0.0 for r in rewards])
    groups = resp.reshape(-1, group_size)
    varied = ~np.all(groups == groups[:, :1], axis=1)
    a = np.zeros_like(groups)
    if varied.any():
        a[varied] = group_zscore(groups[varied], eps=eps, ddof=ddof, xp=np)
    a = a.reshape(-1)
    adv = []
    for ai, r in zip(a, rewards):
        v = np.where(r > 1.0, (r - 1.0) * ai, r * ai) if ai > 0 else (1.0 - r) * ai
        adv.append(np.where(r != 0, v, 0.0).astype(np.float32))
    return adv


def _released(steps, out, g, eps, ddof, rm_coef):
    rewards = [released_rewards(s, np.arange(s.size), s.size, o, rm_coef) for s, o in zip(steps, out)]
    return released_advantages(rewards, g, eps=eps, ddof=ddof)


def _deepseekmath(steps, g, eps, ddof):
    adv = []
    for start in range(0, len(steps), g):
        group = steps[start : start + g]
        flat = np.concatenate(group)
        if flat.size <= ddof:
            raise ValueError(f"a group with {flat.size} step scores has no std with ddof={ddof}; use ddof=0.")
        mean, std = flat.mean(), flat.std(ddof=ddof)
        for s in group:
            norm = (s - mean) / (std + eps)
            adv.append(np.cumsum(norm[::-1])[::-1])
    return adv


def process_advantages(
    step_scores: Sequence[Sequence[float] | np.ndarray],
    outcomes,
    group_size: int,
    *,
    variant: str = "paper",
    eps: float = 1e-6,
    ddof: int = 1,
    rm_coef: float = 1.0,
) -> list[np.ndarray]:
    """Per-step advantages for GRPO with a PRM (Reward-SQL Sec. 5.3; released-code and DeepSeekMath variants).

    Args:
      step_scores: N lists of PRM step scores s_ij in [0, 1] (one per CTE step, the final SELECT included).
      outcomes: [N] outcome rewards o_i (Reward-SQL: 1 if the execution result matches the gold, else 0).
      group_size: G, responses per prompt (contiguous).
      variant: "paper" | "released" | "deepseekmath" (see the module docstring for the formulas).
      eps, ddof: std epsilon and degrees of freedom of the group z-scores.
      rm_coef: PRM weight of "released" (ignored by the others); 0 puts the outcome on the last step only.
    Returns:
      N float32 arrays, the advantage of each step; a response without steps gets an empty array (and, for
      "paper"/"released", a process reward of 0). Broadcast to tokens with `steps_to_tokens`.
    """
    if variant not in PROCESS_VARIANTS:
        raise ValueError(
            f"variant={variant!r} is not a process-advantage variant; choose one of {list(PROCESS_VARIANTS)}."
        )
    steps, out = _as_steps(step_scores, outcomes, group_size)
    if variant == "paper":
        adv = _paper(steps, out, group_size, eps, ddof)
    elif variant == "released":
        adv = _released(steps, out, group_size, eps, ddof, rm_coef)
    else:
        adv = _deepseekmath(steps, group_size, eps, ddof)
    return [np.asarray(a, np.float32) for a in adv]


def steps_to_tokens(
    step_values: Sequence[Sequence[float] | np.ndarray], token_step_ids, *, fill: float = 0.0
) -> np.ndarray:
    """Broadcast per-step values to tokens: out[i, t] = step_values[i][token_step_ids[i, t]] (Reward-SQL Sec. 5.3:
    every token of step j carries A_ij). Ids < 0 (prompt, padding, tokens outside any step) get `fill`.

    Args:
      step_values: N per-step arrays (e.g. the output of `process_advantages`, or EXPO-SQL clause rewards).
      token_step_ids: [N, T] int array of the step index of each token (from the token-alignment helpers).
    Returns: [N, T] float32.
    """
    ids = np.asarray(token_step_ids)
    if ids.ndim != 2 or ids.shape[0] != len(step_values):
        raise ValueError(f"token_step_ids must be [N, T] with N={len(step_values)} rows, got shape {ids.shape}.")
    out = np.full(ids.shape, fill, np.float32)
    for i, given in enumerate(step_values):
        vals = np.asarray(given, np.float32).reshape(-1)
        row = ids[i]
        if row.size and row.max() >= vals.size:
            raise ValueError(
                f"token_step_ids row {i} refers to step {int(row.max())} but response {i} has only "
                f"{vals.size} step values."
            )
        hit = row >= 0
        out[i, hit] = vals[row[hit]]
    return out
