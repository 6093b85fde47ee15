"""Uncertainty of EX tables: percentile-bootstrap 95% intervals of an EX and of paired EX differences.

An EX on n questions moves by 100/n points per question, so a table of methods is evidence only with its
intervals. ``ex_interval`` resamples the questions (with replacement) and reads the 2.5% / 97.5% quantiles of the
resampled EX; ``paired_difference`` resamples the *same* questions for both methods, so what two methods have in
common (easy and impossible questions) cancels and the interval is that of the difference itself (Efron &
Tibshirani 1993, ch. 13; the paired bootstrap of Koehn 2004 for MT). EX values are in points (0-100);
``mean_interval`` / ``paired_mean_difference`` do the same for any per-question quantity in its own unit (calls).
"""

from __future__ import annotations

import numpy as np

RESAMPLES = 2000


def _resampled_means(values: np.ndarray, seed: int, resamples: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return values[idx].mean(axis=1)


def _values(values, what: str) -> np.ndarray:
    x = np.asarray(values, np.float64)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"need a non-empty 1-D array of {what}, got shape {x.shape}")
    return x


def _bounds(x: np.ndarray, seed: int, resamples: int, level: float) -> tuple[float, float]:
    q = (1 - level) / 2
    lo, hi = np.quantile(_resampled_means(x, seed, resamples), [q, 1 - q])
    return float(lo), float(hi)


def mean_interval(values, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"mean", "ci95": [lo, hi]}`` of any per-question quantity in its own unit (e.g. action calls per
    question), by the same percentile bootstrap over questions as ``ex_interval``."""
    x = _values(values, "per-question values")
    lo, hi = _bounds(x, seed, resamples, level)
    return {"mean": float(x.mean()), "ci95": [lo, hi]}


def paired_mean_difference(method, baseline, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"delta", "ci95": [lo, hi]}``: mean(method) - mean(baseline) of a per-question quantity in its own unit,
    on the same questions (paired bootstrap, as ``paired_difference``)."""
    a, b = np.asarray(method, np.float64), np.asarray(baseline, np.float64)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired verdicts need the same questions: shapes {a.shape} and {b.shape}")
    lo, hi = _bounds(a - b, seed, resamples, level)
    return {"delta": float((a - b).mean()), "ci95": [lo, hi]}


def ex_interval(correct, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"ex": points, "ci95": [lo, hi]}`` of per-question verdicts ``correct`` (bool / 0-1)."""
    r = mean_interval(_values(correct, "per-question verdicts"), seed=seed, resamples=resamples, level=level)
    return {"ex": 100 * r["mean"], "ci95": [100 * r["ci95"][0], 100 * r["ci95"][1]]}


def paired_difference(method, baseline, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"delta": points, "ci95": [lo, hi]}``: EX(method) - EX(baseline) on the same questions, paired bootstrap."""
    r = paired_mean_difference(method, baseline, seed=seed, resamples=resamples, level=level)
    return {"delta": 100 * r["delta"], "ci95": [100 * r["ci95"][0], 100 * r["ci95"][1]]}


def evidence_table(verdicts: dict, comparisons, *, seed: int = 0) -> dict:
    """``{"methods": {name: {"ex", "ci95"}}, "comparisons": [{"method", "baseline", "delta", "ci95"}]}`` for
    per-question ``verdicts`` by method and the ``(method, baseline)`` pairs present in them."""
    methods = {m: ex_interval(v, seed=seed) for m, v in verdicts.items()}
    comps = [
        {"method": m, "baseline": b, **paired_difference(verdicts[m], verdicts[b], seed=seed)}
        for m, b in comparisons
        if m in verdicts and b in verdicts and m != b
    ]
    return {"methods": methods, "comparisons": comps}


def auc(scores, labels) -> float:
    """ROC AUC of scores against 0/1 labels by the rank-sum (Mann-Whitney U) formula, ties given their
    average rank; NaN when either class is absent."""
    s, y = np.asarray(scores, np.float64), np.asarray(labels).astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # 1-based average rank of each tie group
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def auc_interval(scores, labels, *, seed: int = 0, resamples: int = 1000, level: float = 0.95) -> dict:
    """``{"auc", "ci95": [lo, hi]}``: the AUC and its percentile-bootstrap interval over the scored items
    (resamples with one class only are skipped; NaN bounds when fewer than 2 of each class exist)."""
    s, y = np.asarray(scores, np.float64), np.asarray(labels).astype(bool)
    point = auc(s, y)
    if y.sum() < 2 or (~y).sum() < 2:
        return {"auc": point, "ci95": [float("nan"), float("nan")]}
    rng = np.random.default_rng(seed)
    every = [auc(s[i], y[i]) for i in rng.integers(0, len(s), size=(resamples, len(s)))]
    draws = np.asarray([d for d in every if not np.isnan(d)])
    q = (1 - level) / 2
    lo, hi = np.quantile(draws, [q, 1 - q])
    return {"auc": point, "ci95": [float(lo), float(hi)]}


def balanced_threshold(scores, labels) -> dict:
    """The score threshold that maximises balanced accuracy (Youden's J = TPR - FPR) on labelled scores: where a
    classifier's positives start for a model whose scores are not calibrated around 0.5 (a PRM trained on
    imbalanced step labels). ``{"threshold", "balanced_accuracy"}``; threshold 0.5 and NaN with one class."""
    s, y = np.asarray(scores, np.float64), np.asarray(labels, bool)
    if s.size == 0 or y.all() or not y.any():
        return {"threshold": 0.5, "balanced_accuracy": float("nan")}
    cuts = np.unique(s)
    tpr = (s[None, y] >= cuts[:, None]).mean(axis=1)
    tnr = (s[None, ~y] < cuts[:, None]).mean(axis=1)
    best = int(np.argmax(tpr + tnr))
    return {"threshold": float(cuts[best]), "balanced_accuracy": float((tpr[best] + tnr[best]) / 2)}
