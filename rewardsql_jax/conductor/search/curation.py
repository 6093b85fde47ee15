"""Workflow supervision curation (SQLConductor Sec. 4.3, Algorithm 2) and stability weights (Sec. 4.4).

* Stability score of a workflow pattern tau for a question: p_tau = successes / re-executions, the
  success rate of the same action sequence re-executed with a sampling action model.
* Per question, the top-k patterns by p_tau (ties: shorter first, then lexicographic) with p_tau > 0.
* Power normalisation (Sec. 4.4): w_tau = p_tau^alpha / sum_{tau' in top-k} p_tau'^alpha (alpha = 2),
  so the weights of each question sum to 1.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CuratedWorkflow:
    """One selected workflow of a question: pattern, stability, SFT weight, representative trajectory."""

    question_id: int
    workflow: tuple
    stability: float
    weight: float
    trajectory: object  # the representative (reasoning-augmented) State


def stability_score(outcomes) -> float:
    """Success rate of re-executions (a list of bools); 0 when there are none."""
    outcomes = list(outcomes)
    return sum(bool(o) for o in outcomes) / len(outcomes) if outcomes else 0.0


def top_k_stable(scores: dict, k: int = 3) -> list:
    """[(workflow, p)] of the k most stable workflows with p > 0."""
    if k < 1:
        raise ValueError(f"top-k needs k >= 1, got {k}")
    ranked = sorted(((w, p) for w, p in scores.items() if p > 0), key=lambda wp: (-wp[1], len(wp[0]), wp[0]))
    return ranked[:k]


def power_weights(stabilities, alpha: float = 2.0) -> list:
    """w_i = p_i^alpha / sum_j p_j^alpha (Sec. 4.4 power normalisation); sums to 1."""
    ps = [float(p) for p in stabilities]
    if not ps or any(p < 0 for p in ps):
        raise ValueError(f"stabilities must be a non-empty list of non-negative numbers, got {ps}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    powered = [p**alpha for p in ps]
    total = sum(powered)
    if total == 0:
        raise ValueError("every stability score is 0; a question without a successful workflow has no weights")
    return [x / total for x in powered]


def curate_question(question_id: int, scores: dict, representatives: dict, *, k: int = 3, alpha: float = 2.0) -> list:
    """CuratedWorkflows of one question from {workflow: p} and {workflow: representative state}."""
    top = [(w, p) for w, p in top_k_stable(scores, k) if w in representatives]
    if not top:
        return []
    weights = power_weights([p for _, p in top], alpha)
    return [CuratedWorkflow(question_id, w, p, wt, representatives[w]) for (w, p), wt in zip(top, weights)]


def curation_summary(curated) -> dict:
    """What ``results.json`` reports of the curated SFT set: its size, the questions it covers, every trajectory's
    stability p_tau and weight w_tau, and per workflow pattern its count, mean stability and summed weight."""
    by_workflow: dict[str, dict] = {}
    for c in curated:
        entry = by_workflow.setdefault(" -> ".join(c.workflow), {"trajectories": 0, "stability": 0.0, "weight": 0.0})
        entry["trajectories"] += 1
        entry["stability"] += c.stability
        entry["weight"] += c.weight
    return {
        "trajectories": len(curated),
        "questions": len({c.question_id for c in curated}),
        "by_workflow": {
            w: {
                "trajectories": e["trajectories"],
                "mean_stability": e["stability"] / e["trajectories"],
                "weight": e["weight"],
            }
            for w, e in sorted(by_workflow.items(), key=lambda we: -we[1]["weight"])
        },
        "stability_weights": [
            {"question_id": c.question_id, "workflow": list(c.workflow), "stability": c.stability, "weight": c.weight}
            for c in curated
        ],
    }
