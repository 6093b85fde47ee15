"""SQLConductor on the built-in benchmark, CPU, small policy and action model trained from scratch (<= 15 minutes).

Evaluation: 240 questions, 3 episodes each (the action model samples; a question's EX is the mean of its episodes),
with 95% bootstrap intervals and paired differences in results.json (``methods`` / ``comparisons``). Held-out
questions of the training databases by default (160 questions per database, every 4th held out: 720 train / 240
eval); ``data.eval_on=test_dbs`` evaluates on 240 of the 480 questions of the three unseen test databases instead.

The action model trains 800 steps (300 left it answering 2-7% of the held-out questions through the fixed workflow,
800 gives ~30%: benchmarks/RESULTS.md), so MCTS finds a successful workflow for most of the 128 explored questions.
The policy's SFT runs 500 steps (at 120 it wrote a malformed call in about half of its decisions when GRPO samples
it at temperature 1, so GRPO learned the format instead of the actions), and GRPO 24 steps.
"""

import dataclasses

from rewardsql_jax.conductor.config import ConductorData, ConductorRunConfig

_BASE = ConductorRunConfig()
CONFIG = dataclasses.replace(
    _BASE,
    data=ConductorData(
        n_train_dbs=6,
        n_test_dbs=3,
        questions_per_db=160,
        max_eval_questions=240,
        max_explore_questions=128,
        eval_repeats=3,
    ),
    action=dataclasses.replace(_BASE.action, steps=800),
    policy=dataclasses.replace(_BASE.policy, sft_steps=500),
    rl=dataclasses.replace(_BASE.rl, steps=24, reward=dataclasses.replace(_BASE.rl.reward, call_cost=0.05)),
)
