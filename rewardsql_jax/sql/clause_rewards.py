"""EXPO-SQL clause-level rewards (section 3.2, Eqs. 1-3): correct / incorrect result / execution error.

``clause_rewards(db_path, pred_sql, gold_sql)`` executes the gold and the predicted query, then:

* correct (the result matches, by default the BIRD rule ``set(pred_rows) == set(gold_rows)``): every clause
  gets ``correct`` (+1.5, Eq. 1);
* incorrect (executable, wrong result): erroneous clauses from clause-wise incremental execution
  (``incremental.py``, Algorithm 1 with the Table 12 fallback) get ``incorrect_erroneous`` (-0.5), the others
  ``incorrect_other`` (+0.5) (Eq. 2);
* error (execution failed): erroneous clauses from the error message (``error_trace.py``, Table 14 and
  backward tracing) get ``error_erroneous`` (-1.5), the others ``error_other`` (-0.5) (Eq. 3). A timeout is an
  execution error (the query cannot be used as an answer, and BIRD/Spider count it as wrong); its message
  carries no location, so the data-retrieval clauses are blamed (see ``error_trace.py``).

Under the BIRD rule the result types ``row_dedup`` and ``row_order`` cannot occur for an incorrect query
(both imply equal row sets); ``RewardOptions(match="ordered_bag")`` (bag equality, plus row order when the
gold query has ORDER BY) makes them reachable. CTE definitions inherit the verdict of the clause that
references them (Table 15). Empty (or non-text, or longer than ``max_sql_chars``) predicted SQL is an
execution error with no clauses: there is nothing to split, and nothing is executed.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable

from .clauses import Clause, SplitSQL, split_sql
from .diff import diff_types
from .error_trace import trace_error
from .execute import ExecResult, execute
from .incremental import build_steps, fallback_flags, locate, run_steps

CASES = ("correct", "incorrect", "error")
_MATCH_RULES = ("bird", "ordered_bag")


@dataclasses.dataclass(frozen=True)
class RewardOptions:
    """Reward constants of EXPO-SQL Eqs. (1)-(3) (paper defaults) and the result-match rule."""

    correct: float = 1.5
    incorrect_erroneous: float = -0.5
    incorrect_other: float = 0.5
    error_erroneous: float = -1.5
    error_other: float = -0.5
    match: str = "bird"
    max_rows: int = 100_000
    max_sql_chars: int = 100_000

    def __post_init__(self):
        for f in ("correct", "incorrect_erroneous", "incorrect_other", "error_erroneous", "error_other"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"RewardOptions.{f} must be a finite number, got {v!r}")
        if self.match not in _MATCH_RULES:
            raise ValueError(f"RewardOptions.match must be one of {_MATCH_RULES}, got {self.match!r}")
        for f in ("max_rows", "max_sql_chars"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"RewardOptions.{f} must be a positive int, got {v!r}")


@dataclasses.dataclass(frozen=True)
class ClauseRewards:
    """``case`` in CASES; ``clauses`` in logical order with rewards; ``diff`` = D* (incorrect case, else
    empty); ``db_calls`` = executions made by this call."""

    case: str
    clauses: tuple[Clause, ...]
    diff: frozenset[str]
    db_calls: int


def _gold_ordered(gold_sql: str) -> bool:
    try:
        return any(s.kind == "ORDER BY" and s.cte is None for s in split_sql(gold_sql).spans)
    except ValueError:
        return False


def results_equal(pred: ExecResult, gold: ExecResult, *, match: str = "bird", ordered: bool = False) -> bool:
    """Whether two successful results match: ``"bird"`` = set of rows equal (BIRD evaluator, EXPO-SQL 3.2
    "R_pred = R_gold"); ``"ordered_bag"`` = equal multisets, and equal sequences when ``ordered``."""
    if match == "bird":
        return set(pred.rows) == set(gold.rows)
    if ordered:
        return list(pred.rows) == list(gold.rows) and len(pred.columns) == len(gold.columns)
    return Counter(pred.rows) == Counter(gold.rows) and len(pred.columns) == len(gold.columns)


def _assign(split: SplitSQL, flagged, bad: float, good: float) -> tuple[Clause, ...]:
    flags = [i in flagged for i in range(len(split.spans))]
    for i, s in enumerate(split.spans):
        if s.ref is not None and s.cte is not None and not flags[i]:
            flags[i] = flags[s.ref]
    return tuple(Clause(s.kind, s.start, s.end, bad if f else good, f) for s, f in zip(split.spans, flags))


def clause_rewards(
    db_path,
    pred_sql: str,
    gold_sql: str,
    *,
    timeout_s: float = 30.0,
    options: RewardOptions = RewardOptions(),
    gold_result: ExecResult | None = None,
    execute_fn: Callable[..., ExecResult] = execute,
) -> ClauseRewards:
    """Clause-level rewards of ``pred_sql`` against ``gold_sql`` on ``db_path`` (EXPO-SQL 3.2, Eqs. 1-3).

    ``gold_result`` reuses an already computed gold result (not counted in ``db_calls``); ``execute_fn``
    (signature of ``execute``) lets callers plug a cache or pool. Raises ValueError when the gold query fails.
    """
    calls = 0

    def run(sql: str) -> ExecResult:
        nonlocal calls
        calls += 1
        return execute_fn(db_path, sql, timeout_s=timeout_s, max_rows=options.max_rows)

    gold = gold_result if gold_result is not None else run(gold_sql)
    if not gold.ok:
        raise ValueError(f"the gold SQL failed on {db_path}: {gold.error!r}; fix the gold query or the db path")
    if not isinstance(pred_sql, str) or not pred_sql.strip() or len(pred_sql) > options.max_sql_chars:
        return ClauseRewards("error", (), frozenset(), calls)
    split = split_sql(pred_sql)
    pred = run(pred_sql)
    if not pred.ok:
        flagged = trace_error(split, pred.error, timed_out=pred.timed_out)
        return ClauseRewards(
            "error", _assign(split, flagged, options.error_erroneous, options.error_other), frozenset(), calls
        )
    ordered = _gold_ordered(gold_sql)
    if results_equal(pred, gold, match=options.match, ordered=ordered):
        return ClauseRewards("correct", _assign(split, (), options.correct, options.correct), frozenset(), calls)
    final = frozenset(diff_types(pred, gold, ordered=ordered))
    try:
        steps = build_steps(pred_sql)
    except ValueError:
        steps = None
    if steps is None:
        flagged = fallback_flags(split, final)
    else:
        results, _ = run_steps(steps, pred, run)
        flagged = locate(split, steps, results, gold, final).flagged
    return ClauseRewards(
        "incorrect", _assign(split, flagged, options.incorrect_erroneous, options.incorrect_other), final, calls
    )
