"""RL algorithms as registered objects and the rollout machinery they share (between training and planning).

``get_algorithm(name)`` / ``register_algorithm`` (``algorithm.py``), the built-ins in ``algorithms/`` (one
module each), rollouts sampled and executed with overlapped host work (``rollouts.py``) and the train batch of
an online update (``batches.py``: the ``Update`` an algorithm returns laid out as the train batch, its mini-batches).
"""

from . import algorithms  # registers the built-ins
from .algorithm import (
    OfflineAlgorithm,
    OnlineAlgorithm,
    RLAlgorithm,
    algorithm_names,
    get_algorithm,
    moved_setting,
    policy_loss,
    register_algorithm,
)
from .batches import Update, train_batch
from .options import options_dict
from .rollouts import RolloutSampler, Rollouts, sample_rollouts, score_rows

__all__ = [
    "OfflineAlgorithm",
    "OnlineAlgorithm",
    "RLAlgorithm",
    "RolloutSampler",
    "Rollouts",
    "Update",
    "algorithm_names",
    "algorithms",
    "get_algorithm",
    "moved_setting",
    "options_dict",
    "policy_loss",
    "register_algorithm",
    "sample_rollouts",
    "score_rows",
    "train_batch",
]
