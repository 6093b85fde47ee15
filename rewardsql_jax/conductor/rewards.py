"""SQLConductor's execution-oriented reward (Sec. 4.4, Curriculum RL).

R_exec(y) = 1 if y executes, else 0.
R_out(y)  = 0 if y does not execute, else ExecF1(y, y*) + bonus * 1[Exec(y) == Exec(y*)],
            ExecF1 = F1 over multisets of normalised result cells (``sql.compare.cell_f1``),
            exact = BIRD set rule (``sql.results_match``).
R(y)      = lambda * R_exec + (1 - lambda) * R_out.

An episode's reward may also pay ``call_cost`` per action call (``episode_reward``; 0 = the paper's reward).
"""

from __future__ import annotations

import dataclasses

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
