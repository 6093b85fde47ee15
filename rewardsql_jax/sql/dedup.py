"""Syntax-tree edit-distance filter for Chain-of-CTEs candidates (Reward-SQL section 4.1, "语法树编辑距离").

The paper parses every CoCTE with sqlglot, takes the pre-order traversal of its syntax tree and uses the
normalised edit distance between two traversals as their (dis)similarity; per question it repeatedly drops
the CoCTE whose summed distance to the others is smallest (the most redundant one) until the kept ratio is
reached, so the most structurally diverse CoCTEs remain.

Traversal tokens are sqlglot node type names (``Select``, ``Column``, ``Identifier``, ``EQ``, ...), i.e. the
tree *structure*: two CoCTEs that differ only in table/column names or constants are structurally identical.
``values=True`` also appends identifier names (lower-cased) and literal values to their nodes' tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .parse import parse_sql


def preorder_tokens(sql: str, *, values: bool = False) -> tuple[str, ...]:
    """Pre-order (depth-first, parent before children) traversal of the sqlglot tree of ``sql``
    (Reward-SQL section 4.1). Raises ValueError when ``sql`` is not one parseable SQLite statement."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("each candidate must be a non-empty SQL string")
    try:
        trees = [t for t in parse_sql(sql) if t is not None]
    except SqlglotError as e:
        raise ValueError(f"cannot parse candidate as SQLite: {e}") from None
    if len(trees) != 1:
        raise ValueError(f"a candidate must be exactly one SQL statement, got {len(trees)}")
    out = []
    for node in trees[0].walk(bfs=False):
        name = type(node).__name__
        if values and isinstance(node, exp.Identifier):
            name = f"{name}:{node.name.lower()}"
        elif values and isinstance(node, exp.Literal):
            name = f"{name}:{node.this}"
        out.append(name)
    return tuple(out)


def _levenshtein_to_many(a: np.ndarray, bs: list[np.ndarray]) -> np.ndarray:
    """Edit distances (unit insert/delete/substitute) from ``a`` to every sequence in ``bs``.

    Row-by-row DP over ``a``, vectorised over all of ``bs`` (padded) and over the columns: the insertion
    chain within a row, D[i, j] = min_k<=j (T[k] + j - k), is a cumulative minimum of T[k] - k."""
    lens = np.array([len(b) for b in bs])
    width = int(lens.max()) if len(bs) else 0
    padded = np.full((len(bs), width), -1, dtype=np.int64)
    for r, b in enumerate(bs):
        padded[r, : len(b)] = b
    cols = np.arange(width + 1)
    prev = np.broadcast_to(cols, (len(bs), width + 1)).copy()
    for i, token in enumerate(a, start=1):
        tmp = np.empty_like(prev)
        tmp[:, 0] = i
        tmp[:, 1:] = np.minimum(prev[:, 1:] + 1, prev[:, :-1] + (padded != token))
        prev = np.minimum.accumulate(tmp - cols, axis=1) + cols
    return prev[np.arange(len(bs)), lens]


def _encode(seqs: Sequence[tuple[str, ...]]) -> list[np.ndarray]:
    vocab: dict[str, int] = {}
    return [np.array([vocab.setdefault(t, len(vocab)) for t in s], dtype=np.int64) for s in seqs]


def distance_matrix(candidates: Sequence[str], *, values: bool = False) -> np.ndarray:
    """Symmetric [N, N] float64 matrix of normalised traversal edit distances, lev(a, b) / max(|a|, |b|)
    (Reward-SQL section 4.1); the diagonal is 0."""
    seqs = []
    for i, c in enumerate(candidates):
        try:
            seqs.append(preorder_tokens(c, values=values))
        except ValueError as e:
            raise ValueError(f"candidate {i}: {e}") from None
    codes = _encode(seqs)
    n = len(codes)
    out = np.zeros((n, n))
    for i in range(n - 1):
        d = _levenshtein_to_many(codes[i], codes[i + 1 :])
        denom = np.maximum(len(codes[i]), np.array([len(c) for c in codes[i + 1 :]]))
        out[i, i + 1 :] = out[i + 1 :, i] = d / denom
    return out


def cocte_similarity(a: str, b: str, *, values: bool = False) -> float:
    """1 - normalised edit distance between the pre-order syntax-tree traversals of two CoCTEs
    (Reward-SQL section 4.1). In [0, 1]; 1 for structurally identical queries; symmetric."""
    return float(1.0 - distance_matrix([a, b], values=values)[0, 1])


def _keep_count(keep, n: int) -> int:
    if isinstance(keep, bool) or not isinstance(keep, (int, float)):
        raise TypeError(f"keep must be an int count or a float ratio in (0, 1], got {keep!r}")
    if isinstance(keep, int):
        if keep < 1:
            raise ValueError(f"keep={keep}: pass a count >= 1 (or a ratio in (0, 1])")
        return min(keep, n)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep={keep}: a float keep is a ratio and must be in (0, 1]; pass an int for a count")
    return max(1, math.ceil(keep * n - 1e-9))


def dedup(candidates: Sequence[str], keep, *, values: bool = False) -> list:
    """Keep the most structurally diverse CoCTEs of one question (Reward-SQL section 4.1 filter).

    Repeatedly removes the candidate whose summed normalised distance to the remaining candidates is the
    smallest (the most redundant) until ``keep`` remain: an int is a count, a float a ratio of
    ``len(candidates)`` (rounded up, at least 1). Ties remove the later candidate (higher original index),
    so earlier ones are preferred. Returns the kept candidates in their original order.
    """
    candidates = list(candidates)
    if not candidates:
        return []
    k = _keep_count(keep, len(candidates))
    dist = distance_matrix(candidates, values=values)
    alive = np.ones(len(candidates), dtype=bool)
    sums = dist.sum(axis=1)
    for _ in range(len(candidates) - k):
        masked = np.where(alive, sums, np.inf)
        victim = int(np.flatnonzero(masked <= masked.min() + 1e-9)[-1])  # float-summation-order ties
        alive[victim] = False
        sums -= dist[:, victim]
    return [c for c, a in zip(candidates, alive) if a]
