"""DPO from PRM-scored candidates (Reward-SQL Sec. 5.2): one pair per question, C_w = argmax R, C_l = argmin R
(R = PR + OR), kept when R_w > R_l; loss ``dpo`` (beta ``rl.algorithm_options.beta``) against the SFT policy."""

from __future__ import annotations

import dataclasses

from rewardsql_jax.training.batch import PreferenceBatch
from rewardsql_jax.training.collate import preference_batch

from ..algorithm import OfflineAlgorithm, register_algorithm


def dpo_pairs(candidates: list[dict]) -> list[tuple[dict, dict]]:
    """(best, worst) candidate by R = PR + OR per question, when the best is strictly better."""
    by_q: dict[int, list[dict]] = {}
    for c in candidates:
        by_q.setdefault(c["question"], []).append(c)
    pairs = []
    for group in by_q.values():
        best = max(group, key=lambda c: c["reward"])
        worst = min(group, key=lambda c: c["reward"])
        if best["reward"] > worst["reward"]:
            pairs.append((best, worst))
    return pairs


def quadrant(c: dict) -> str:
    """PR/OR quadrant of a candidate as the evaluate stage's Table 1 (+PR: PR >= 0.5)."""
    return f"{'+' if c['pr'] >= 0.5 else '-'}PR/{'+' if c['or'] > 0 else '-'}OR"


@dataclasses.dataclass(frozen=True)
class DPOOptions:
    """``rl.algorithm_options`` of ``dpo``: ``beta``, the DPO temperature (TRL's default 0.1)."""

    beta: float = 0.1

    def __post_init__(self):
        if not self.beta > 0:
            raise ValueError(f"rl.algorithm_options.beta must be positive (DPO's beta), got {self.beta}")


def _count(labels):
    return {k: labels.count(k) for k in sorted(set(labels))}


@register_algorithm
class DPO(OfflineAlgorithm):
    name = "dpo"
    loss = "dpo"
    batch_type = PreferenceBatch
    options_type = DPOOptions
    moved_settings = {"dpo_beta": "beta"}

    def loss_options(self, rl) -> dict:
        return {"beta": self.options(rl).beta}

    def select(self, candidates, rl):
        return dpo_pairs(candidates)

    def batch(self, items, *, length, pad_id):
        return preference_batch(
            [a["prompt_ids"] for a, _ in items],
            [a["token_ids"] for a, _ in items],
            [b["token_ids"] for _, b in items],
            length=length,
            pad_id=pad_id,
        )

    def summary(self, items, candidates) -> dict:
        return {
            "pairs": len(items),
            "chosen_quadrants": _count([quadrant(a) for a, _ in items]),
            "rejected_quadrants": _count([quadrant(b) for _, b in items]),
        }

    def step_metrics(self, m) -> dict:
        # beta * log(pi / pi_ref) of each side: both falling is DPO's likelihood displacement
        return {
            "reward_accuracy": float(m["rewards/accuracies"]),
            "reward_margin": float(m["rewards/margins"]),
            "reward_chosen": float(m["rewards/chosen"]),
            "reward_rejected": float(m["rewards/rejected"]),
        }
