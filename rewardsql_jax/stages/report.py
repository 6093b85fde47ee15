"""The final table ``launch/run.py`` prints."""

from __future__ import annotations

METHOD_NAMES = {
    "greedy_sft": "SFT greedy",
    "greedy_rl": "SFT+RL greedy",
    "best_of_n": "PRM Best-of-N",
    "self_consistency": "self-consistency vote",
    "zero_shot": "zero-shot (chat template)",
}


EVIDENCE_LABELS = {
    "sft_greedy": "SFT greedy",
    "rl_greedy": "SFT+RL greedy",
    "best_of_n": "PRM Best-of-N",
    "self_consistency": "self-consistency vote",
    "predictions": "predictions file",
    "zero_shot": "zero-shot (chat template)",
}


def summary_lines(config, results: dict) -> list[str]:
    lines = [f"run: {config.name}  ({config.run_dir})"]
    if "cold_start" in results:
        c = results["cold_start"]
        lines.append(
            f"cold start: {c['train_questions']} train / {c['eval_questions']} eval questions; "
            f"{c['cocte_verified']} gold queries became verified CoCTEs"
        )
    if "prm" in results and "heldout" in results["prm"]:
        h = results["prm"]["heldout"]
        lo, hi = h.get("auc_ci95", [float("nan")] * 2)
        lines.append(
            f"PRM held-out steps: AUC {h.get('auc', float('nan')):.3f} [{lo:.3f}, {hi:.3f}] on {h.get('steps', 0)} "
            f"steps ({h.get('positives', 0)} positive)  accuracy {h.get('accuracy', float('nan')):.3f}"
        )
    if "evaluate" in results:
        e = results["evaluate"]
        lines.append(f"EX ({e['ex_mode']} rule) on {e['questions']} held-out questions, 95% bootstrap intervals:")
        if "methods" in e:
            for m, r in e["methods"].items():
                lines.append(
                    f"  {EVIDENCE_LABELS.get(m, m):<24} {r['ex']:6.1f}%  [{r['ci95'][0]:5.1f}, {r['ci95'][1]:5.1f}]"
                )
            lines.append("paired differences (points, same questions):")
            for c in e["comparisons"]:
                label = f"{EVIDENCE_LABELS.get(c['method'], c['method'])} - {EVIDENCE_LABELS.get(c['baseline'], c['baseline'])}"
                lines.append(f"  {label:<44} {c['delta']:+6.1f}  [{c['ci95'][0]:+5.1f}, {c['ci95'][1]:+5.1f}]")
        else:
            for m, v in e["ex"].items():
                lines.append(f"  {METHOD_NAMES.get(m, m):<24} {100 * v:6.1f}%")
        if e.get("headroom"):
            lines.append(headroom_line(e["headroom"]))
    timed = [f"{s} {r['wall_seconds']:.0f}s" for s, r in results.items() if isinstance(r, dict) and "wall_seconds" in r]
    if timed:
        lines.append("stage wall time (the run that finished each): " + ", ".join(timed))
    return lines


def _ci(r: dict, key: str = "ex", sign: str = "") -> str:
    return f"{r[key]:{sign}.1f} [{r['ci95'][0]:{sign}.1f}, {r['ci95'][1]:{sign}.1f}]"


def headroom_line(h: dict) -> str:
    """One line: the policy's greedy EX, pass@1 / pass@N of its own samples and pass@N - greedy vs the target."""
    n, t = h["n"], h["target"]
    lo, hi = t["greedy_range"]
    return (
        f"headroom ({h['policy'].upper()}, T={h['temperature']}): greedy {_ci(h['greedy'])}  "
        f"pass@1 {_ci(h['pass@1'])}  pass@{n} {_ci(h[f'pass@{n}'])}  "
        f"({_ci(h['pass_at_n_minus_greedy'], 'delta', '+')}; target +{t['pass_at_n_minus_greedy_min']:g}, "
        f"greedy {lo:g}-{hi:g}: {'met' if t['met'] else 'not met'})"
    )


def print_summary(config, results: dict) -> None:
    print("\n".join(["", "=" * 60, *summary_lines(config, results), "=" * 60]))
