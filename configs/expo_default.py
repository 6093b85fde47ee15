"""EXPO-SQL's claim on the embedded benchmark: clause-level rewards (``reinforce_pp``, EXPO-SQL Sec. 3.3) against
query-level ones (``grpo_outcome``) with the same budget — the default run's data, model, SFT and RL steps,
prompts x samples and learning rate, no PRM (neither algorithm uses one).

    python launch/run.py --config configs/expo_default.py                              # clause rewards
    python launch/run.py --config configs/expo_default.py rl.algorithm=grpo_outcome \\
        run_dir=runs/expo_default_outcome                                             # query-level rewards

Each run's ``evaluate/metrics.json`` holds SFT greedy and SFT+RL greedy EX with 95% intervals and their paired
difference; the two runs share the SFT policy when the second is started from a copy of the first run's
``cold_start/`` and ``sft/`` (same seed: the stages are deterministic, so rerunning them gives the same policy).
"""

import dataclasses
from pathlib import Path

from rewardsql_jax.config import load_config

DEFAULT = load_config(Path(__file__).with_name("default.py"))

CONFIG = dataclasses.replace(
    DEFAULT,
    name="expo_default",
    run_dir="runs/expo_default",
    stages=("cold_start", "sft", "rl", "inference", "evaluate"),
    rl=dataclasses.replace(DEFAULT.rl, algorithm="reinforce_pp"),
)
