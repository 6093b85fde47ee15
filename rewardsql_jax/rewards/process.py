"""Reward-SQL process (step-level) advantages from PRM step scores and outcome rewards (host side, numpy).

Three variants, all over contiguous groups of `group_size` responses to one prompt:
  paper:        Reward-SQL Sec. 5.1 + 5.3. R_i = mean_j s_ij + o_i; A_i = (R_i - mean_g) / (std_g + eps);
                A_ij = A_i * s_ij if A_i > 0 else A_i * (1 - s_ij).
  released:     the authors' released code (DESIGN.md). r_ij = rm_coef * s_ij + o_i (the token reward of every
                token of step j); R_i = mean of the *distinct* nonzero r_ij; A_i = z-score of R_i in the group;
                A_ij = (r_ij - 1) A_i if A_i > 0 and r_ij > 1; r_ij A_i if A_i > 0; (1 - r_ij) A_i if A_i <= 0.
  deepseekmath: DeepSeekMath process supervision (Shao et al. 2024, Sec. 4.1.3; Reward-SQL appendix A.3.1).
                s~_ij = (s_ij - mean(R_g)) / (std(R_g) + eps) over all step scores R_g of the group;
                A_ij = sum_{j' >= j} s~_ij' (return-to-go over steps). Outcomes are not used (the formula has none).
Std uses Bessel's correction (ddof=1) and eps=1e-6 by default; both are options.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

PROCESS_VARIANTS = ("paper", "released", "deepseekmath")


def _as_steps(step_scores, outcomes, group_size):
    steps = [np.asarray(s, np.float64).reshape(-1) for s in step_scores]
    out = np.asarray(outcomes, np.float64).reshape(-1)
    if len(steps) != out.shape[0]:
        raise ValueError(f"step_scores has {len(steps)} responses but outcomes has {out.shape[0]}; "
                         f"give one outcome per response.")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}.")
    if len(steps) % group_size != 0:
        raise ValueError(f"{len(steps)} responses is not a multiple of group_size={group_size}; "
                         f"pass all completions of every prompt, grouped contiguously.")
    return steps, out


def _zscore(x: np.ndarray, eps: float, ddof: int) -> np.ndarray:
    if x.size <= ddof:
        raise ValueError(f"a group of {x.size} values has no std with ddof={ddof}; use a larger group or ddof=0.")
    return (x - x.mean()) / (x.std(ddof=ddof) + eps)


def _paper(steps, out, g, eps, ddof):
    pr = np.array([s.mean() if s.size else 0.0 for s in steps])
    a = np.concatenate([_zscore(chunk, eps, ddof) for chunk in (pr + out).reshape(-1, g)])
    return [ai * s if ai > 0 else ai * (1.0 - s) for ai, s in zip(a, steps)]


def _released(steps, out, g, eps, ddof, rm_coef):
    token_r = [rm_coef * s + o for s, o in zip(steps, out)]
    resp = []
    for r in token_r:
        distinct = np.unique(r[r != 0])  # the released code averages the set of distinct nonzero token rewards
        resp.append(distinct.mean() if distinct.size else 0.0)
    a = np.concatenate([_zscore(chunk, eps, ddof) for chunk in np.asarray(resp).reshape(-1, g)])
    adv = []
    for ai, r in zip(a, token_r):
        if ai > 0:
            adv.append(np.where(r > 1.0, (r - 1.0) * ai, r * ai))
        else:
            adv.append((1.0 - r) * ai)
    return adv


def _deepseekmath(steps, g, eps, ddof):
    adv = []
    for start in range(0, len(steps), g):
        group = steps[start:start + g]
        flat = np.concatenate(group)
        if flat.size <= ddof:
            raise ValueError(f"a group with {flat.size} step scores has no std with ddof={ddof}; use ddof=0.")
        mean, std = flat.mean(), flat.std(ddof=ddof)
        for s in group:
            norm = (s - mean) / (std + eps)
            adv.append(np.cumsum(norm[::-1])[::-1])
    return adv


def process_advantages(step_scores: Sequence[Sequence[float]], outcomes, group_size: int, *,
                       variant: str = "paper", eps: float = 1e-6, ddof: int = 1,
                       rm_coef: float = 1.0) -> list[np.ndarray]:
    """Per-step advantages for GRPO with a PRM (Reward-SQL Sec. 5.3; released-code and DeepSeekMath variants).

    Args:
      step_scores: N lists of PRM step scores s_ij in [0, 1] (one per CTE step, the final SELECT included).
      outcomes: [N] outcome rewards o_i (Reward-SQL: 1 if the execution result matches the gold, else 0).
      group_size: G, responses per prompt (contiguous).
      variant: "paper" | "released" | "deepseekmath" (see the module docstring for the formulas).
      eps, ddof: std epsilon and degrees of freedom of the group z-scores; rm_coef: PRM weight ("released").
    Returns:
      N float32 arrays, the advantage of each step; a response without steps gets an empty array (and, for
      "paper"/"released", a process reward of 0). Broadcast to tokens with `steps_to_tokens`.
    """
    if variant not in PROCESS_VARIANTS:
        raise ValueError(f"variant={variant!r} is not a process-advantage variant; choose one of "
                         f"{list(PROCESS_VARIANTS)}.")
    steps, out = _as_steps(step_scores, outcomes, group_size)
    if variant == "paper":
        adv = _paper(steps, out, group_size, eps, ddof)
    elif variant == "released":
        adv = _released(steps, out, group_size, eps, ddof, rm_coef)
    else:
        adv = _deepseekmath(steps, group_size, eps, ddof)
    return [np.asarray(a, np.float32) for a in adv]


def steps_to_tokens(step_values: Sequence[Sequence[float]], token_step_ids, *, fill: float = 0.0) -> np.ndarray:
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
    for i, vals in enumerate(step_values):
        vals = np.asarray(vals, np.float32).reshape(-1)
        row = ids[i]
        if row.size and row.max() >= vals.size:
            raise ValueError(f"token_step_ids row {i} refers to step {int(row.max())} but response {i} has only "
                             f"{vals.size} step values.")
        hit = row >= 0
        out[i, hit] = vals[row[hit]]
    return out
