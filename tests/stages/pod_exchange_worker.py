"""One process of tests/stages/test_pod_exchange.py: the host-value exchange a pod's stages use, run as one of
several processes (gloo, a localhost coordinator). Prints one JSON line of what this process saw."""

import json

from rewardsql_jax.distributed import (
    all_gather_objects,
    gather_rows,
    maybe_initialize_distributed,
    owns_row,
    process_count,
    process_index,
)

maybe_initialize_distributed()
from rewardsql_jax.stages.rl.setup import prm_scores  # noqa: E402


class CountingScorer:
    """A PRM stand-in: one "score" per step of each response (its length), remembering what it was asked."""

    def __init__(self):
        self.asked = []

    def score(self, prompts, responses):
        self.asked += list(responses)
        return [[float(len(p)), float(len(r))] for p, r in zip(prompts, responses)]


me = process_index()
gathered = [all_gather_objects("value", {"process": me, "rows": list(range(me + 1))}) for _ in range(3)]
n = 7
rows = gather_rows("rows", n, [f"row {r} by {me}" for r in range(n) if owns_row(r)])
scorer = CountingScorer()
prompts, responses = [f"q{r // 2}" for r in range(n)], ["x" * (r + 1) for r in range(n)]
scores = prm_scores(scorer, prompts, responses)
print(
    json.dumps(
        {
            "process": me,
            "processes": process_count(),
            "gathered": gathered,
            "rows": rows,
            "scores": scores,
            "scored_here": scorer.asked,
        }
    )
)
