"""SQLConductor's execution-oriented reward (Sec. 4.4, Curriculum RL).

R_exec(y) = 1 if y executes, else 0.
R_out(y)  = 0 if y does not execute, else ExecF1(y, y*) + bonus * 1[Exec(y) == Exec(y*)],
            ExecF1 = F1 over multisets of normalised result cells (``sql.compare.cell_f1``),
            exact = BIRD set rule (``sql.results_match``).
R(y)      = lambda * R_exec + (1 - lambda) * R_out.

An episode's reward may also pay ``call_cost`` per action call (``episode_reward``; 0 = the paper's reward).

Per-step credit (``rl.credit=step``, not in the paper, whose GRPO puts one advantage on every token of an
episode): decision t of episode i gets A_{i,t} = R_i - b_{i,t}, where b_{i,t} is the reward of terminating at
s_t (``stop_value``: the working SQL's R less the calls to there) when s_t has a SQL, else the group mean of R
(``step_advantages``). b depends on the state only, so the policy gradient stays unbiased, while the luck of the
sampled action calls before t (a right or a wrong first query) no longer lands on decision t.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rewardsql_jax.sql import ExecResult, execute, result_f1, results_match


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """``lam`` balances executability and outcome; ``exact_bonus`` is added to ExecF1 on an exact match."""

    lam: float = 0.2
    exact_bonus: float = 1.0
    call_cost: float = 0.0  # subtracted per action call of an episode (not in the paper; 0 = off)

    def __post_init__(self):
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"reward lam must be in [0, 1], got {self.lam}")
        if self.exact_bonus < 0:
            raise ValueError(f"exact_bonus must be >= 0, got {self.exact_bonus}")
        if self.call_cost < 0:
            raise ValueError(f"rl.reward.call_cost must be >= 0, got {self.call_cost}")


@dataclasses.dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    executable: bool
    exec_f1: float
    exact: bool


def score(pred: ExecResult | None, gold: ExecResult, cfg: RewardConfig = RewardConfig()) -> RewardBreakdown:
    """Reward of an executed prediction (None = the workflow returned no SQL)."""
    if pred is None or not pred.ok:
        return RewardBreakdown(0.0, False, 0.0, False)
    f1 = result_f1(pred, gold, "cells")
    exact = results_match(pred, gold, "bird")
    outcome = f1 + cfg.exact_bonus * exact
    return RewardBreakdown(cfg.lam * 1.0 + (1 - cfg.lam) * outcome, True, f1, exact)


def score_sql(
    db_path, sql: str | None, gold: ExecResult, cfg: RewardConfig = RewardConfig(), timeout_s: float = 10.0
) -> RewardBreakdown:
    return score(None if not sql else execute(db_path, sql, timeout_s=timeout_s), gold, cfg)


def episode_reward(breakdown: RewardBreakdown, calls: int, cfg: RewardConfig = RewardConfig()) -> float:
    """An episode's reward: R(y) of its final SQL minus ``call_cost`` per action call it made."""
    return breakdown.reward - cfg.call_cost * calls


def stop_value(breakdown: RewardBreakdown, calls_before: int, cfg: RewardConfig = RewardConfig()) -> float:
    """The episode reward of terminating at a state after ``calls_before`` calls whose working SQL scores
    ``breakdown`` (terminate is one more call)."""
    return episode_reward(breakdown, calls_before + 1, cfg)


def step_advantages(rewards, step_values, group_size: int) -> list:
    """Per-decision advantages A_{i,t} = R_i - b_{i,t} (module docstring): one float32 array per episode, one entry a
    policy decision; ``step_values[i][t]`` is b_{i,t} or None (then the mean R of episode i's group)."""
    rewards = np.asarray(rewards, np.float64)
    if rewards.ndim != 1 or len(rewards) != len(step_values) or len(rewards) % group_size:
        raise ValueError(
            f"step_advantages needs one reward and one step-value tuple per episode, whole groups of {group_size}; "
            f"got {rewards.shape} rewards and {len(step_values)} step-value tuples"
        )
    means = rewards.reshape(-1, group_size).mean(axis=1).repeat(group_size)
    return [
        np.asarray([r - (m if b is None else b) for b in values], np.float32)
        for r, m, values in zip(rewards, means, step_values)
    ]
