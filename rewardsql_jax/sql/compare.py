"""Execution-based comparison: EX (BIRD and Spider rules) and ExecF1 (BIRD soft-F1, SQLConductor cells).

* ``mode="bird"`` — the official BIRD evaluator (bird-bench ``evaluation_ex.py``): prediction and
  gold are executed, the prediction is correct iff ``set(pred_rows) == set(gold_rows)``; an
  error or a timeout is wrong. Reward-SQL's EX (DESIGN.md) is this rule.
* ``mode="spider"`` — ``eval_exec_match`` of taoyds/test-suite-sql-eval (``exec_eval.py``) as its
  command line runs it by default (``--plug_value`` and ``--keep_distinct`` off): the prediction's
  " value " becomes " 1 " (``evaluation.py``), both queries get ``postprocess`` ("> =" -> ">=" ...),
  ``remove_distinct`` (every DISTINCT token is dropped, and only the first statement of the text
  is kept, as sqlparse splits it) and ``replace_cur_year``; text is decoded with
  ``errors="ignore"``; results are compared with ``result_eq`` (bag semantics, any column
  permutation, row order only when the gold text contains "order by").
  The official script also re-runs both queries on every other ``*.sqlite`` file in the
  database's folder (its distilled test suites); with Spider's layout (one file per folder) that
  is the same database, so it is not repeated here. The official script asserts that the gold
  runs; here a failing gold makes the verdict False.

Results are compared as Python values, exactly as both official scripts do (``1 == 1.0``; floats
are not rounded). Rows beyond ``max_rows`` make the execution fail (see ``execute.py``).
"""

from __future__ import annotations

import collections
import math
import re

from .execute import DEFAULT_MAX_ROWS, ExecResult, execute

MODES = ("bird", "spider")
F1_KINDS = ("soft", "cells")

# ---- Spider test-suite text preprocessing --------------------------------------------------
# Token classes of sqlparse's lexer (the official remove_distinct tokenises with sqlparse), in its
# priority order, kept only as far as they decide which tokens are a bare word "distinct", where
# a statement ends, and which tokens are comments.
_L = "A-ZÀ-Ü"
_SPIDER_TOKEN = re.compile(
    rf"""(?P<comment>(?:--|\#\ ).*?(?:\r\n|\r|\n|$))
    |(?P<mcomment>/\*[\s\S]*?\*/)
    |(?P<nl>\r\n|\r|\n)
    |(?P<ws>[^\S\r\n]+)
    |(?P<lit>`(?:``|[^`])*`|´(?:´´|[^´])*´|\?|(?P<dq>\$(?:[_{_L}]\w*)?\$)[\s\S]*?(?P=dq)
        |%(?:\(\w+\))?s|(?<!\w)[$:?]\w+|\\\w+|(?:@|\#\#|\#)[{_L}]\w+)
    |(?P<name>[{_L}]\w*(?=\s*\.(?!\d))|(?<=\.)[{_L}]\w*|[{_L}]\w*(?=\())
    |(?P<num>-?0x[\dA-F]+|-?\d+(?:\.\d+)?E-?\d+|(?![_{_L}])-?(?:\d+(?:\.\d*)|\.\d+)(?![_{_L}])
        |(?![_{_L}])-?\d+(?![_{_L}]))
    |(?P<str>'(?:''|\\'|[^'])*'|"(?:""|\\"|[^"])*"|(?:""|".*?[^\\]")|(?<![\w\])])\[[^\]\[]+\])
    |(?P<end>END(?:\s+IF|\s+LOOP|\s+WHILE|\s+FOR|\s+CASE)?\b)
    |(?P<go>GO\s\d+\b)
    |(?P<word>\w[$\#\w]*)
    |(?P<other>[\s\S])""",
    re.IGNORECASE | re.VERBOSE,
)
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def spider_remove_distinct(sql: str) -> str | None:
    """The test-suite ``remove_distinct``: first statement only, bare DISTINCT tokens removed.

    Returns None where the official function raises (text that is empty or only whitespace).
    """
    out: list[str] = []
    depth = 0
    ended = False
    for m in _SPIDER_TOKEN.finditer(sql):
        kind, tok = m.lastgroup, m.group()
        if ended:
            if kind not in ("ws", "comment"):
                break
        elif tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
        elif kind == "end" or (kind == "word" and tok.upper() == "END"):
            depth -= 1
        elif (tok == ";" and depth <= 0) or (kind in ("go", "word") and tok.split()[0] == "GO"):
            ended = True  # sqlparse also ends a statement at an upper-case GO keyword
        if tok.lower() != "distinct" or kind not in ("name", "word"):
            out.append(tok)
    if not sql.strip():
        return None
    return "".join(out)


def spider_prepare(sql: str, *, prediction: bool) -> str | None:
    """Text the Spider test-suite evaluator actually executes (None: the official script crashes).

    ``evaluation.py`` replaces " value " by " 1 " in predictions; ``exec_eval.py`` applies
    ``postprocess``, ``remove_distinct`` (``--keep_distinct`` off) and ``replace_cur_year``.
    """
    if not isinstance(sql, str):
        return None
    if prediction:
        sql = sql.replace(" value ", " 1 ")
    sql = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    out = spider_remove_distinct(sql)
    return None if out is None else _CUR_YEAR.sub("2020", out)


def spider_order_matters(gold_sql: str) -> bool:
    """Test-suite rule: row order matters iff the (prepared) gold text contains "order by"."""
    return "order by" in gold_sql.lower()


# ---- result comparison ----------------------------------------------------------------------
def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def _column_perms(gold: list, pred: list, ncols: int):
    """Column maps p (gold col i <- pred col p[i]) that keep every column's multiset of values.

    A permutation that makes the tables equal must keep these multisets, so searching only these
    gives the same verdict as the official enumeration, which prunes with random rows instead.
    """
    gold_cols = [collections.Counter(r[i] for r in gold) for i in range(ncols)]
    pred_cols = [collections.Counter(r[j] for r in pred) for j in range(ncols)]
    options = [[j for j in range(ncols) if gold_cols[i] == pred_cols[j]] for i in range(ncols)]
    perm: list[int] = []
    used = [False] * ncols

    def dfs(i):
        if i == ncols:
            yield tuple(perm)
            return
        for j in options[i]:
            if not used[j]:
                used[j] = True
                perm.append(j)
                yield from dfs(i + 1)
                perm.pop()
                used[j] = False

    return dfs(0)


def spider_rows_match(gold_rows, pred_rows, order_matters: bool) -> bool:
    """Test-suite ``result_eq(gold, pred, order_matters)``: equal up to a column permutation.

    Rules: two empty results are equal; different row or column counts are not; the official
    quick rejection (each row's values sorted by ``str(v) + str(type(v))``; compared as lists
    if order matters, else as sets) must pass; then some column permutation must make the rows
    equal as lists (order matters) or as multisets (bag semantics).
    """
    gold, pred = list(gold_rows), list(pred_rows)
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    ncols = len(gold[0])
    if len(pred[0]) != ncols:
        return False
    ug, up = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    if (ug != up) if order_matters else (set(ug) != set(up)):
        return False
    gold_bag = None if order_matters else collections.Counter(gold)
    for perm in _column_perms(gold, pred, ncols):
        permuted = [tuple(r[j] for j in perm) for r in pred]
        if (gold == permuted) if order_matters else (gold_bag == collections.Counter(permuted)):
            return True
    return False


def bird_rows_match(pred_rows, gold_rows) -> bool:
    """BIRD ``calculate_ex``: ``set(predicted_res) == set(ground_truth_res)``."""
    return set(pred_rows) == set(gold_rows)


def results_match(pred: ExecResult, gold: ExecResult, mode: str = "bird", *, order_matters: bool = False) -> bool:
    """EX verdict on two already-executed results; a failed or timed-out execution is wrong.

    ``order_matters`` is used by ``mode="spider"`` only; get it from the gold text with
    :func:`spider_order_matters` (after :func:`spider_prepare`).
    """
    _check_mode(mode)
    if not (pred.ok and gold.ok):
        return False
    if mode == "bird":
        return bird_rows_match(pred.rows, gold.rows)
    return spider_rows_match(gold.rows, pred.rows, order_matters)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def _jobs_for(db_path, pred_sql, gold_sql, mode):
    """((db, pred_text), (db, gold_text), order_matters) or None when Spider's evaluator would crash."""
    if mode == "bird":
        return (db_path, pred_sql), (db_path, gold_sql), False
    pred, gold = spider_prepare(pred_sql, prediction=True), spider_prepare(gold_sql, prediction=False)
    if pred is None or gold is None:
        return None
    return (db_path, pred), (db_path, gold), spider_order_matters(gold)


def exec_match(
    db_path, pred_sql, gold_sql, *, mode: str = "bird", timeout_s: float = 30.0, max_rows: int = DEFAULT_MAX_ROWS
) -> bool:
    """Execution accuracy (EX) of one prediction: BIRD's set rule or Spider's test-suite rule.

    Reward-SQL's outcome reward OR(C) (Sec. 5.1) and EX metric (Sec. 6.1) use the BIRD rule; Spider
    EX is the test-suite ``eval_exec_match``; both rules are in the module docstring. Never raises
    for bad SQL: any execution failure is False.
    """
    return exec_match_batch([(db_path, pred_sql, gold_sql)], mode=mode, timeout_s=timeout_s, max_rows=max_rows)[0]


def exec_match_batch(
    items, *, mode: str = "bird", timeout_s: float = 30.0, pool=None, max_rows: int | None = None
) -> list[bool]:
    """:func:`exec_match` for many ``(db_path, pred_sql, gold_sql)``; runs on ``pool`` if given."""
    _check_mode(mode)
    plans = [_jobs_for(db, p, g, mode) for db, p, g in items]
    jobs = [job for plan in plans if plan for job in plan[:2]]
    results = iter(_run(jobs, mode, timeout_s, pool, max_rows))
    verdicts = []
    for plan in plans:
        if plan is None:
            verdicts.append(False)
            continue
        pred, gold = next(results), next(results)
        verdicts.append(results_match(pred, gold, mode, order_matters=plan[2]))
    return verdicts


def _run(jobs, mode, timeout_s, pool, max_rows):
    text_errors = "ignore" if mode == "spider" else "strict"
    if pool is not None:
        return pool.map(jobs, timeout_s=timeout_s, max_rows=max_rows, text_errors=text_errors)
    max_rows = DEFAULT_MAX_ROWS if max_rows is None else max_rows
    return [execute(db, sql, timeout_s=timeout_s, max_rows=max_rows, text_errors=text_errors) for db, sql in jobs]


# ---- F1 ---------------------------------------------------------------------------------------
def soft_f1(pred_rows, gold_rows) -> float:
    """BIRD mini-dev Soft-F1 (bird-bench/mini_dev ``evaluation_f1.py``).

    Both results are de-duplicated keeping first occurrences; row i of the prediction is paired
    with row i of the gold. For a pair, with ``n = len(gold_row)``: matched = (#pred values found
    in the gold row) / n, pred-only = (#pred values not in it) / n, gold-only = (#gold values not
    in the pred row) / n. An unpaired gold row adds gold-only 1, an unpaired pred row pred-only 1.
    TP, FP, FN are the sums; F1 = 2PR / (P + R) with P = TP/(TP+FP), R = TP/(TP+FN); 0 when
    undefined; 1.0 when both results are empty.
    """
    if not pred_rows and not gold_rows:
        return 1.0
    pred = list(dict.fromkeys(pred_rows))
    gold = list(dict.fromkeys(gold_rows))
    tp = fp = fn = 0.0
    for i, g in enumerate(gold):
        if i >= len(pred):
            fn += 1
            continue
        p, n = pred[i], len(g)
        hits = sum(v in g for v in p)
        tp += hits / n
        fp += (len(p) - hits) / n
        fn += sum(v not in p for v in g) / n
    fp += max(0, len(pred) - len(gold))
    return _f1(tp, fp, fn)


def normalize_cell(v):
    """Cell normalisation for :func:`cell_f1` (our choice; the SQLConductor paper does not fix it).

    Text is stripped (bytes decoded as UTF-8 with replacement); integral floats become ints;
    other floats are rounded to 6 decimals; None, ints and the rest are kept.
    """
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", errors="replace")
    if isinstance(v, str):
        return v.strip()
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and math.isfinite(v):
        return int(v) if v.is_integer() else round(v, 6)
    return v


def cell_f1(pred_rows, gold_rows) -> float:
    """SQLConductor ExecF1 (Curriculum RL, Outcome Reward): F1 over multisets of normalised cell values.

    V and V* are the multisets of :func:`normalize_cell` over every cell of the prediction and of
    the gold; TP = |V ∩ V*| counted with multiplicity, FP = |V| - TP, FN = |V*| - TP;
    ExecF1 = 2PR / (P + R). Row and column order are ignored. 1.0 when both results are empty.
    """
    pv = collections.Counter(normalize_cell(v) for r in pred_rows for v in r)
    gv = collections.Counter(normalize_cell(v) for r in gold_rows for v in r)
    if not pv and not gv:
        return 1.0
    tp = sum((pv & gv).values())
    return _f1(tp, sum(pv.values()) - tp, sum(gv.values()) - tp)


def _f1(tp: float, fp: float, fn: float) -> float:
    precision = tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = tp / (tp + fn) if tp + fn > 0 else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def result_f1(pred: ExecResult, gold: ExecResult, kind: str = "soft") -> float:
    """F1 of two executed results (``kind`` "soft" = BIRD Soft-F1, "cells" = SQLConductor ExecF1).

    A failed or timed-out execution scores 0.0, as in both sources.
    """
    if kind not in F1_KINDS:
        raise ValueError(f"kind must be one of {F1_KINDS}, got {kind!r}")
    if not (pred.ok and gold.ok):
        return 0.0
    return soft_f1(pred.rows, gold.rows) if kind == "soft" else cell_f1(pred.rows, gold.rows)


def exec_f1(
    db_path, pred_sql, gold_sql, *, kind: str = "soft", timeout_s: float = 30.0, max_rows: int = DEFAULT_MAX_ROWS
) -> float:
    """Execute both queries and return :func:`result_f1` (BIRD mini-dev Soft-F1 by default)."""
    if kind not in F1_KINDS:
        raise ValueError(f"kind must be one of {F1_KINDS}, got {kind!r}")
    pred = execute(db_path, pred_sql, timeout_s=timeout_s, max_rows=max_rows)
    gold = execute(db_path, gold_sql, timeout_s=timeout_s, max_rows=max_rows)
    return result_f1(pred, gold, kind)
