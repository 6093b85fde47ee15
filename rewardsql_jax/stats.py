"""Uncertainty of EX tables: percentile-bootstrap 95% intervals of an EX and of paired EX differences.

An EX on n questions moves by 100/n points per question, so a table of methods is evidence only with its
intervals. ``ex_interval`` resamples the questions (with replacement) and reads the 2.5% / 97.5% quantiles of the
resampled EX; ``paired_difference`` resamples the *same* questions for both methods, so what two methods have in
common (easy and impossible questions) cancels and the interval is that of the difference itself (Efron &
Tibshirani 1993, ch. 13; the paired bootstrap of Koehn 2004 for MT). EX values are in points (0-100).
"""
from __future__ import annotations

import numpy as np

RESAMPLES = 2000


def _resampled_means(values: np.ndarray, seed: int, resamples: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return values[idx].mean(axis=1)


def ex_interval(correct, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"ex": points, "ci95": [lo, hi]}`` of per-question verdicts ``correct`` (bool / 0-1)."""
    x = np.asarray(correct, np.float64)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"need a non-empty 1-D array of per-question verdicts, got shape {x.shape}")
    q = (1 - level) / 2
    lo, hi = np.quantile(_resampled_means(x, seed, resamples), [q, 1 - q])
    return {"ex": 100 * float(x.mean()), "ci95": [100 * float(lo), 100 * float(hi)]}


def paired_difference(method, baseline, *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95) -> dict:
    """``{"delta": points, "ci95": [lo, hi]}``: EX(method) - EX(baseline) on the same questions, paired bootstrap."""
    a, b = np.asarray(method, np.float64), np.asarray(baseline, np.float64)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired verdicts need the same questions: shapes {a.shape} and {b.shape}")
    q = (1 - level) / 2
    lo, hi = np.quantile(_resampled_means(a - b, seed, resamples), [q, 1 - q])
    return {"delta": 100 * float((a - b).mean()), "ci95": [100 * float(lo), 100 * float(hi)]}


def evidence_table(verdicts: dict, comparisons, *, seed: int = 0) -> dict:
    """``{"methods": {name: {"ex", "ci95"}}, "comparisons": [{"method", "baseline", "delta", "ci95"}]}`` for
    per-question ``verdicts`` by method and the ``(method, baseline)`` pairs present in them."""
    methods = {m: ex_interval(v, seed=seed) for m, v in verdicts.items()}
    comps = [{"method": m, "baseline": b, **paired_difference(verdicts[m], verdicts[b], seed=seed)}
             for m, b in comparisons if m in verdicts and b in verdicts and m != b]
    return {"methods": methods, "comparisons": comps}
