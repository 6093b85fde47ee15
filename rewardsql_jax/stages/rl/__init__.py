"""Stage 5 — RL from the SFT policy (Reward-SQL Sec. 5.2-5.3; EXPO-SQL Sec. 3.3), resumable.

``rl.algorithm`` names a registered algorithm (``rewardsql_jax.rl``): online grpo (PRM + outcome, Sec. 5.3),
grpo_outcome, grpo_deepseekmath, reinforce_pp (EXPO-SQL clause rewards), run by ``online.py`` (one iteration:
generate -> execute -> reward -> advantage -> update), or offline dpo / rs from PRM-scored candidates
(``offline.py``), or a plugin's. ``rl.loss`` / ``rl.loss_options`` swap the algorithm's loss for another of its
family. The reference policy of the KL / DPO terms is the SFT policy; the PRM is read from ``prm/model``.

Both loops share ``setup.py``. Resume: the train state is checkpointed with Orbax (``training/step_checkpoints.py``) to
``rl/checkpoint`` every ``rl.checkpoint_every`` steps (default 5) and after the last step; a rerun continues
from the newest finished checkpoint (delete ``rl/`` to start over). ``rl.stop_after`` / env
``REWARDSQL_RL_STOP_AFTER=N`` checkpoints and stops after N steps of this process (raising ``RLStopped``): the
test hook that simulates a killed run. A SIGTERM stops at the next step boundary, after a checkpoint
(``training/preemption.py``). Artefacts: ``rl/policy`` (HF dir), ``rl/metrics.json`` (reward and OR-rate curves,
first-vs-last OR rate, phase seconds, rollout tokens/s) and ``rl/learning_curve.png``.
"""

from __future__ import annotations

from rewardsql_jax.rl import get_algorithm
from rewardsql_jax.training.preemption import deferred_sigterm

from ..context import RunContext
from .offline import run_offline
from .online import run_online
from .setup import STOP_ENV, RLStopped

__all__ = ["STOP_ENV", "RLStopped", "run_rl"]


def run_rl(ctx: RunContext) -> dict:
    algorithm = get_algorithm(ctx.config.rl.algorithm)
    algorithm.validate(ctx.config)  # also when the config was built in Python without the rl stage listed
    with deferred_sigterm():  # a SIGTERM stops at the next step boundary, after a checkpoint
        return run_online(ctx) if algorithm.online else run_offline(ctx)
