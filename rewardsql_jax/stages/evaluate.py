"""Stage 7 — evaluation: EX (BIRD or Spider rule) per method overall and by difficulty, the PR/OR quadrant
table of Reward-SQL Table 1, pass@n / PRM@n curves (paper Figure 10) as a PNG, the SFT policy's headroom (its
greedy EX vs pass@1 / pass@N of its own samples, with 95% intervals and the target check), and official-format
prediction files (BIRD: ``{question_id: "SQL\\t----- bird -----\\tdb_id"}``; Spider: one SQL per line).
"""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

import numpy as np

from rewardsql_jax.rewards.prm_scoring import aggregate_steps
from rewardsql_jax.sql import exec_match_batch
from rewardsql_jax.stats import evidence_table, ex_interval, paired_difference

from .context import RunContext
from .inference import pick_best_of_n

# method keys of predictions.json -> their names in ``methods`` / ``comparisons`` (EX in points, 95% intervals)
EVIDENCE_NAMES = {
    "predictions": "predictions",
    "greedy_sft": "sft_greedy",
    "greedy_rl": "rl_greedy",
    "best_of_n": "best_of_n",
    "self_consistency": "self_consistency",
    "zero_shot": "zero_shot",
}
# (method, baseline): every method against SFT greedy (the zero-shot baseline too), and the paper's Table 4 claims:
# Best-of-N above greedy of the same policy, Best-of-N at least as good as self-consistency
COMPARISONS = (
    ("rl_greedy", "sft_greedy"),
    ("best_of_n", "sft_greedy"),
    ("self_consistency", "sft_greedy"),
    ("best_of_n", "rl_greedy"),
    ("best_of_n", "self_consistency"),
    ("zero_shot", "sft_greedy"),
)
# the SFT policy leaves room for RL / reranking when its samples beat its greedy answer by this many points
# and its greedy EX is neither hopeless nor saturated
HEADROOM_MIN_GAIN = 10
HEADROOM_GREEDY_RANGE = (20, 60)


def _ex(ctx, records, sqls) -> list[bool]:
    items = [(r["db_path"], s or "", r["gold_sql"]) for r, s in zip(records, sqls)]
    return exec_match_batch(items, mode=ctx.config.data.ex_mode, pool=ctx.pool())


def _by_difficulty(records, verdicts) -> dict:
    groups = collections.defaultdict(list)
    for r, v in zip(records, verdicts):
        groups[r["difficulty"]].append(v)
    return {k: float(np.mean(v)) for k, v in sorted(groups.items())}


def quadrants(pr_scores, correct, threshold: float = 0.5) -> dict:
    """Share of predictions in each PR/OR quadrant (Table 1): +PR means aggregated PRM score >= threshold."""
    n = max(len(correct), 1)
    table = {"+PR/+OR": 0, "+PR/-OR": 0, "-PR/+OR": 0, "-PR/-OR": 0}
    for s, c in zip(pr_scores, correct):
        table[f"{'+' if s >= threshold else '-'}PR/{'+' if c else '-'}OR"] += 1
    return {k: v / n for k, v in table.items()}


def quadrant_threshold(run_dir) -> dict:
    """The quadrant table's +PR cut: ``heldout.threshold`` of ``run_dir/prm/metrics.json`` (the held-out steps'
    cut of best balanced accuracy, ``stats.balanced_threshold``) when the prm stage wrote one with a defined
    balanced accuracy, else 0.5. ``{"value", "source"}`` as recorded in evaluate's ``quadrant_threshold``."""
    path = Path(run_dir) / "prm" / "metrics.json"
    try:
        heldout = json.loads(path.read_text()).get("heldout") or {}
    except (OSError, ValueError):
        heldout = {}
    t, bacc = heldout.get("threshold"), heldout.get("balanced_accuracy")
    if isinstance(t, (int, float)) and math.isfinite(t) and isinstance(bacc, (int, float)) and math.isfinite(bacc):
        return {"value": float(t), "source": "prm heldout balanced accuracy"}
    return {"value": 0.5, "source": "default 0.5"}


def curves(candidates_correct, candidate_scores, aggregation: str, ns) -> dict:
    """pass@n (any of the first n correct) and PRM@n (PRM Best-of-n of the first n correct)."""
    out = {"n": list(ns), "pass@n": [], "prm@n": []}
    for n in ns:
        out["pass@n"].append(float(np.mean([any(c[:n]) for c in candidates_correct])))
        if candidate_scores is not None:
            picks = []
            for cands, corr in zip(candidate_scores, candidates_correct):
                i = pick_best_of_n(cands[:n], aggregation)
                picks.append(bool(corr[i]) if i is not None else False)
            out["prm@n"].append(float(np.mean(picks)))
    return out


def _plot(curve, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(curve["n"], curve["pass@n"], "o-", label="pass@n")
    if curve["prm@n"]:
        ax.plot(curve["n"], curve["prm@n"], "s-", label="PRM@n (Best-of-n)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("n candidates")
    ax.set_ylabel("EX")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_official(out, records, sqls, source: str) -> None:
    if source == "bird" or source == "builtin":
        payload = {str(r["question_id"]): f"{s}\t----- bird -----\t{r['db_id']}" for r, s in zip(records, sqls)}
        (out / "predict_dev.json").write_text(json.dumps(payload, indent=1))
    if source != "bird":
        (out / "predict_spider.txt").write_text("".join(" ".join((s or "SELECT 1").split()) + "\n" for s in sqls))


def run_evaluate(ctx: RunContext) -> dict:
    cfg, out = ctx.config, ctx.stage_dir("evaluate")
    records = ctx.records("cold_start", "eval.jsonl")
    preds = json.loads(ctx.require("inference", "predictions.json").read_text())
    methods = [m for m in EVIDENCE_NAMES if preds and preds[0].get(m) is not None]
    table, by_diff, verdicts = {}, {}, {}
    for m in methods:
        v = _ex(ctx, records, [p.get(m) for p in preds])
        verdicts[m], table[m], by_diff[m] = v, float(np.mean(v)), _by_difficulty(records, v)
    if not methods:
        raise ValueError("inference/predictions.json holds no predictions; rerun the inference stage")
    curve, quad, cand_correct = None, None, None
    threshold = quadrant_threshold(ctx.run_dir)
    if preds and preds[0]["candidates"]:
        curve, quad, cand_correct = _candidate_metrics(ctx, records, preds, out, threshold["value"])
    best = max(table, key=table.__getitem__)
    _write_official(out, records, [p.get(best) for p in preds], cfg.data.source)
    evidence = evidence_table({EVIDENCE_NAMES[m]: verdicts[m] for m in methods}, COMPARISONS, seed=cfg.seed)
    return ctx.finish(
        "evaluate",
        {
            "ex": table,
            "ex_by_difficulty": by_diff,
            "quadrants": quad,
            "quadrant_threshold": threshold if quad is not None else None,
            "curves": curve,
            "ex_mode": cfg.data.ex_mode,
            "questions": len(records),
            "best_method": best,
            "headroom": _sft_headroom(ctx, records, preds, verdicts, cand_correct),
            **evidence,
        },
    )


def _candidate_metrics(ctx, records, preds, out, threshold: float = 0.5):
    """pass@n / PRM@n curves (+ PNG) and the PR/OR quadrant table (+PR: score >= ``threshold``) from the sampled
    candidates."""
    flat = [(r, c["sql"]) for r, p in zip(records, preds) for c in p["candidates"]]
    flat_ok = _ex(ctx, [r for r, _ in flat], [s for _, s in flat])
    it = iter(flat_ok)
    cand_correct = [[next(it) for _ in p["candidates"]] for p in preds]
    has_prm = bool(preds) and preds[0]["candidates"][0]["step_scores"] is not None
    n_max = len(preds[0]["candidates"]) if preds else 1
    ns = [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= n_max]
    agg = ctx.config.inference.aggregation
    curve = curves(cand_correct, [p["candidates"] for p in preds] if has_prm else None, agg, ns)
    _plot(curve, out / "pass_at_n.png")
    quad = None
    if has_prm:  # PR of the first sampled candidate vs its outcome, as the paper's quadrant table
        pr = [aggregate_steps(p["candidates"][0]["step_scores"], agg) for p in preds]
        # threshold is calibrated on single step scores; fine for min aggregation (PR >= t iff every step >= t)
        quad = quadrants(pr, [c[0] for c in cand_correct], threshold)
    return curve, quad, cand_correct


def headroom(greedy_correct, samples_correct, *, temperature: float, seed: int = 0, policy: str = "sft") -> dict:
    """Headroom of one policy on the same questions: greedy EX, pass@1 (unbiased: per question the share of its
    N samples that are correct, then the mean over questions), pass@N (any of the N samples correct) and the paired
    difference pass@N - greedy, each with its 95% bootstrap interval (points); ``target.met`` when pass@N is at
    least ``HEADROOM_MIN_GAIN`` points above greedy and greedy lies in ``HEADROOM_GREEDY_RANGE``."""
    n = len(samples_correct[0]) if len(samples_correct) else 0
    if len(greedy_correct) != len(samples_correct) or not n or any(len(s) != n for s in samples_correct):
        raise ValueError(
            f"headroom needs N >= 1 samples for each of the {len(greedy_correct)} greedy questions, "
            f"got {[len(s) for s in samples_correct][:5]}..."
        )
    greedy = np.asarray(greedy_correct, np.float64)
    samples = np.asarray(samples_correct, np.float64)
    pass_1, pass_n = samples.mean(axis=1), samples.max(axis=1)
    g = ex_interval(greedy, seed=seed)
    gain = paired_difference(pass_n, greedy, seed=seed)
    lo, hi = HEADROOM_GREEDY_RANGE
    return {
        "policy": policy,
        "n": n,
        "temperature": temperature,
        "greedy": g,
        "pass@1": ex_interval(pass_1, seed=seed),
        f"pass@{n}": ex_interval(pass_n, seed=seed),
        "pass_at_n_minus_greedy": gain,
        "target": {
            "pass_at_n_minus_greedy_min": HEADROOM_MIN_GAIN,
            "greedy_range": [lo, hi],
            "met": bool(gain["delta"] >= HEADROOM_MIN_GAIN and lo <= g["ex"] <= hi),
        },
    }


def _sft_headroom(ctx, records, preds, verdicts, cand_correct) -> dict | None:
    """``headroom`` of the SFT policy from its greedy verdicts and its own samples: ``sft_candidates`` when the
    final policy is the RL one, else ``candidates`` (already executed for the curves). None without SFT greedy
    predictions or samples (a predictions file, or inference run before ``sft_candidates`` existed)."""
    if not preds or "greedy_sft" not in verdicts:
        return None
    if preds[0].get("sft_candidates"):
        flat = [(r, c["sql"]) for r, p in zip(records, preds) for c in p["sft_candidates"]]
        it = iter(_ex(ctx, [r for r, _ in flat], [s for _, s in flat]))
        samples = [[next(it) for _ in p["sft_candidates"]] for p in preds]
    elif cand_correct is not None and preds[0].get("policy_for_candidates") == "sft":
        samples = cand_correct
    else:
        return None
    return headroom(verdicts["greedy_sft"], samples, temperature=ctx.config.inference.temperature, seed=ctx.config.seed)
