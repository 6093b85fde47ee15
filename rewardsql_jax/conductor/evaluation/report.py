"""The printed EX table and the workflow-length figure (SQLConductor Table 4 / Figure 7 analogues)."""

from __future__ import annotations

from pathlib import Path

_ORDER = {"simple": 0, "moderate": 1, "challenging": 2}


def _diff_key(d: str):
    return (_ORDER.get(d, 3), d)


METHOD_LABELS = {
    "fixed_workflow": "fixed workflow",
    "untrained_policy": "untrained policy",
    "sft_policy": "SFT policy",
    "sft_rl_policy": "SFT+RL policy",
}


def summary_lines(results: dict) -> list:
    """One line per evaluated method: EX (overall, by difficulty), executability, calls and tokens per question."""
    methods = [m for m in METHOD_LABELS if m in results.get("evaluations", {})]
    if not methods:
        return ["SQLConductor: no evaluation results"]
    diffs = sorted({d for m in methods for d in results["evaluations"][m]["ex_by_difficulty"]}, key=_diff_key)
    head = (
        f"{'method':<18} {'EX':>6} "
        + " ".join(f"{d[:5]:>6}" for d in diffs)
        + f" {'exec':>6} {'calls':>6} {'pol.tok':>8} {'act.tok':>8}"
    )
    lines = [
        f"SQLConductor on {results.get('benchmark', 'the built-in benchmark')} "
        f"({results['evaluations'][methods[0]]['questions']} test questions)",
        head,
    ]
    for m in methods:
        s = results["evaluations"][m]
        lines.append(
            f"{METHOD_LABELS[m]:<18} {100 * s['ex']:6.1f} "
            + " ".join(f"{100 * s['ex_by_difficulty'].get(d, 0.0):6.1f}" for d in diffs)
            + f" {100 * s['executable']:6.1f} {s['mean_action_calls']:6.2f} {s['mean_policy_tokens']:8.1f}"
            f" {s['mean_action_tokens']:8.1f}"
        )
    lines += evidence_lines(results)
    x = results.get("exploration")
    if x:
        share = 100 * x["mcts_success"] / max(x["questions"], 1)
        lines.append(
            f"exploration: {x['mcts_success']}/{x['questions']} questions ({share:.0f}%) with a successful MCTS "
            f"workflow; {x['curated_workflows']} curated trajectories (stability weights: results.json curation)"
        )
    if results.get("figure"):
        lines.append(f"workflow lengths by difficulty: {results['figure']}")
    return lines


def _ci(lo_hi, fmt: str) -> str:
    return "[" + ", ".join(format(v, fmt) for v in lo_hi) + "]"


def evidence_lines(results: dict) -> list:
    """The table of ``results["methods"]`` / ``["comparisons"]``: EX (points) and calls per question with 95%
    bootstrap intervals, then each paired difference (same questions) with its interval."""
    methods, comps = results.get("methods") or {}, results.get("comparisons") or []
    if not methods:
        return []
    lines = ["", f"{'method':<18} {'EX %':>6} {'95% CI':>14} {'calls/q':>8} {'95% CI':>14}"]
    for m in [m for m in METHOD_LABELS if m in methods]:
        e = methods[m]
        lines.append(
            f"{METHOD_LABELS[m]:<18} {e['ex']:6.1f} {_ci(e['ci95'], '.1f'):>14} {e['calls']:8.2f} "
            f"{_ci(e['calls_ci95'], '.2f'):>14}"
        )
    if comps:
        lines += [
            "",
            "paired differences on the same questions (EX in points, calls per question; 95% CI):",
            f"{'method - baseline':<36} {'dEX':>6} {'95% CI':>14} {'dcalls':>7} {'95% CI':>14}",
        ]
        for c in comps:
            name = f"{METHOD_LABELS.get(c['method'], c['method'])} - {METHOD_LABELS.get(c['baseline'], c['baseline'])}"
            lines.append(
                f"{name:<36} {c['delta']:+6.1f} {_ci(c['ci95'], '+.1f'):>14} {c['calls_delta']:+7.2f} "
                f"{_ci(c['calls_ci95'], '+.2f'):>14}"
            )
    return lines


def workflow_lengths(records: dict) -> dict:
    """The numbers behind the workflow-length figure, for ``results.json``: ``{method: {difficulty or "all":
    {"questions", "mean_calls", "mean_steps"}}}`` from ``{method: [EpisodeRecord]}``; calls are the policy's
    steps (malformed calls included), steps the well-formed actions of its workflow."""
    out = {}
    for method, recs in records.items():
        groups: dict[str, list] = {}
        for r in recs:
            groups.setdefault(r.difficulty, []).append(r)
        groups = {d: groups[d] for d in sorted(groups, key=_diff_key)}
        if recs:
            groups["all"] = list(recs)
        out[method] = {
            d: {
                "questions": len({r.question_id for r in rs}),
                "mean_calls": sum(r.num_calls for r in rs) / len(rs),
                "mean_steps": sum(len(r.workflow) for r in rs) / len(rs),
            }
            for d, rs in groups.items()
        }
    return out


def plot_workflow_lengths(
    evaluations: dict, path: str | Path, methods=("untrained_policy", "sft_policy", "sft_rl_policy")
) -> Path | None:
    """Bar chart of the action-call distribution per difficulty (+ All), one bar group per policy (Figure 7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in methods if m in evaluations]
    if not methods:
        return None
    diffs = sorted({d for m in methods for d in evaluations[m]["length_hist"]}, key=_diff_key) + ["all"]
    fig, axes = plt.subplots(1, len(diffs), figsize=(4 * len(diffs), 3.2), squeeze=False)
    for ax, d in zip(axes[0], diffs):
        hists = {}
        for m in methods:
            h = evaluations[m]["length_hist"]
            if d == "all":
                merged: dict = {}
                for per in h.values():
                    for k, v in per.items():
                        merged[int(k)] = merged.get(int(k), 0) + v
                hists[m] = merged
            else:
                hists[m] = {int(k): v for k, v in h.get(d, {}).items()}
        lengths = sorted({k for h in hists.values() for k in h}) or [0]
        width = 0.8 / len(methods)
        for i, m in enumerate(methods):
            total = max(sum(hists[m].values()), 1)
            ax.bar(
                [x + i * width for x in range(len(lengths))],
                [hists[m].get(k, 0) / total for k in lengths],
                width=width,
                label=METHOD_LABELS[m],
            )
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(lengths))], [str(k) for k in lengths])
        ax.set_title(d.capitalize())
        ax.set_xlabel("action calls")
    axes[0][0].set_ylabel("fraction of questions")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
