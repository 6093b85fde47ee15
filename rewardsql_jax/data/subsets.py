"""Seeded subsets of a loaded split: a fixed evaluation subset stratified by difficulty, and the questions of each
training database held out for RL (apart from the SFT questions)."""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from rewardsql_jax.data.examples import Example


def proportional_counts(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many of ``n`` draws each stratum gets: ``n * size / total`` rounded down, the draws left over given one
    each to the strata with the largest remainders (ties: the order of ``sizes``). Sums to ``min(n, total)``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    quotas = {k: n * s / total for k, s in sizes.items()}
    counts = {k: int(q) for k, q in quotas.items()}
    by_remainder = sorted(sizes, key=lambda k: -(quotas[k] - counts[k]))  # stable: ties keep the order of sizes
    for k in by_remainder[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def stratified_subset(labels: Sequence[str], n: int, seed: int) -> list[int]:
    """Indices of ``n`` items stratified by ``labels``: each label's share is ``proportional_counts`` (largest-
    remainder rounding), its items drawn at random with ``seed``; returned in their original order. All indices when
    ``n`` is 0 or at least ``len(labels)``."""
    if not n or n >= len(labels):
        return list(range(len(labels)))
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, label in enumerate(labels):
        groups[label].append(i)
    strata = sorted(groups)
    counts = proportional_counts({k: len(groups[k]) for k in strata}, n)
    rng = np.random.default_rng(seed)
    keep = [int(i) for k in strata for i in rng.choice(groups[k], size=counts[k], replace=False)]
    return sorted(keep)


def _query_key(sql: str) -> str:
    return " ".join(sql.lower().split()).rstrip(";").strip()


def held_out_per_database(examples: Sequence[Example], per_db: int, seed: int) -> tuple[list[Example], list[Example]]:
    """(kept, held out): for each database up to ``per_db`` of its questions held out, at most half of them (the
    kept split keeps every database). Questions with the same gold query (Spider has paraphrases of one query) go to
    the same side, so no gold query is in both: a database's distinct queries are shuffled with ``seed`` and taken
    while they fit. Both lists keep the original order."""
    if per_db < 0:
        raise ValueError(f"per_db must be >= 0, got {per_db}")
    rng = np.random.default_rng(seed)
    by_db: dict[str, dict[str, list[int]]] = {}
    for i, ex in enumerate(examples):
        by_db.setdefault(ex.db_id, {}).setdefault(_query_key(ex.gold_sql), []).append(i)
    held: set[int] = set()
    for queries in by_db.values():
        cap = min(per_db, sum(len(g) for g in queries.values()) // 2)
        groups = list(queries.values())
        taken = 0
        for j in rng.permutation(len(groups)):
            if taken + len(groups[j]) <= cap:
                held.update(groups[j])
                taken += len(groups[j])
    kept = [ex for i, ex in enumerate(examples) if i not in held]
    return kept, [ex for i, ex in enumerate(examples) if i in held]
