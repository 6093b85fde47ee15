"""Online evaluation (Algorithm 3) and its report: EX, action calls, tokens, workflow lengths by difficulty.

All episodes of an evaluation run concurrently through one ``CallBatcher`` (policy and action model
batched across questions). EX follows the BIRD set rule; a workflow that returns no SQL is wrong.
``evidence`` puts 95% bootstrap intervals on EX and calls per question and paired-bootstrap differences of the
policies against the fixed workflow and the SFT policy (``rewardsql_jax.stats``, the shape of the Reward-SQL
evaluate stage's ``methods`` / ``comparisons``).
"""

from __future__ import annotations

import collections

from rewardsql_jax.stats import evidence_table, mean_interval, paired_mean_difference

from ..actions.batching import CallBatcher
from ..actions.episode import run_workflow
from ..actions.lm import action_handlers
from ..rewards import RewardConfig
from ..training.rollout import bind, initial_state, record

# The evaluated methods in table order, and (method, baseline) pairs of the evidence: every policy against the
# fixed workflow (the paper's claim: a learned policy beats a fixed workflow) and against the SFT policy (what
# curriculum RL adds; untrained vs SFT: what stability-weighted SFT adds).
METHODS = ("fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy")
COMPARISONS = tuple((m, b) for b in ("fixed_workflow", "sft_policy") for m in METHODS[1:] if m != b)


def run_fixed_workflow(
    examples,
    env,
    tokenizer,
    action_server,
    workflow,
    reward_cfg: RewardConfig = RewardConfig(),
    repeats: int = 1,
    desc: str | None = None,
) -> list:
    """The fixed-workflow baseline (e.g. generate -> refine -> terminate), ``repeats`` episodes per example
    (question-major), episode ``("fixed_workflow", question_id, repeat)``'s action calls seeded from that id.
    ``desc``: a progress bar's name."""
    batcher = CallBatcher(action_handlers(action_server, tokenizer))
    items = [(ex, r) for ex in examples for r in range(repeats)]
    jobs = [
        lambda call, ex=ex, r=r: run_workflow(
            bind(initial_state(ex, env), call, ("fixed_workflow", ex.question_id, r)), workflow
        )
        for ex, r in items
    ]
    states = batcher.run(jobs, desc)
    return [record(ex, s, 0, reward_cfg) for (ex, _), s in zip(items, states)]


def per_question(records, field: str) -> tuple[list, list]:
    """(question ids in first-seen order, the mean of ``field`` over each question's episodes)."""
    groups: dict = {}
    for r in records:
        groups.setdefault(r.question_id, []).append(float(getattr(r, field)))
    return list(groups), [sum(v) / len(v) for v in groups.values()]


def summarize(records) -> dict:
    """EX overall and by difficulty, executability, mean action calls / tokens, workflow-length histograms."""
    n = max(len(records), 1)
    by_diff = collections.defaultdict(list)
    for r in records:
        by_diff[r.difficulty].append(r)
    return {
        "questions": len({r.question_id for r in records}),
        "episodes": len(records),
        "ex": sum(r.exact for r in records) / n,
        "ex_by_difficulty": {d: sum(r.exact for r in rs) / len(rs) for d, rs in sorted(by_diff.items())},
        "executable": sum(r.executable for r in records) / n,
        "mean_action_calls": sum(r.num_calls for r in records) / n,
        "mean_policy_tokens": sum(r.policy_tokens for r in records) / n,
        "mean_action_tokens": sum(r.action_tokens for r in records) / n,
        "mean_reward": sum(r.reward for r in records) / n,
        "length_hist": {
            d: dict(sorted(collections.Counter(r.num_calls for r in rs).items())) for d, rs in sorted(by_diff.items())
        },
        "action_counts": dict(collections.Counter(a for r in records for a in r.workflow).most_common()),
    }


def evidence(records: dict, *, seed: int = 0, comparisons=COMPARISONS) -> dict:
    """``{"methods": {name: {"ex", "ci95", "calls", "calls_ci95"}}, "comparisons": [{"method", "baseline", "delta",
    "ci95", "calls_delta", "calls_ci95"}]}`` from ``{method: [EpisodeRecord]}`` (EX in points 0-100, calls per
    question; 95% percentile-bootstrap intervals over questions, differences paired on the same questions; with
    several episodes a question, its EX and calls are their means)."""
    exact = {m: per_question(recs, "exact") for m, recs in records.items()}
    calls = {m: per_question(recs, "num_calls")[1] for m, recs in records.items()}
    if len({tuple(q) for q, _ in exact.values()}) > 1:
        raise ValueError(
            "evidence needs every method evaluated on the same questions in the same order: "
            + ", ".join(f"{m}: {len(q)} questions" for m, (q, _) in exact.items())
        )
    table = evidence_table({m: v for m, (_, v) in exact.items()}, comparisons, seed=seed)
    for m, entry in table["methods"].items():
        c = mean_interval(calls[m], seed=seed)
        entry.update(calls=c["mean"], calls_ci95=c["ci95"])
    for entry in table["comparisons"]:
        d = paired_mean_difference(calls[entry["method"]], calls[entry["baseline"]], seed=seed)
        entry.update(calls_delta=d["delta"], calls_ci95=d["ci95"])
    return table
