"""SQLConductor (papers/sqlconductor.md): a small policy orchestrates text-to-SQL actions step by step.

Action space and registry (``actions``), orchestration state (``state``), tagged trajectory format and
parser (``format``), MCTS workflow exploration (``search``), curation with stability weights
(``curation``), stability-weighted SFT with <results> masked (``train``, ``trajectory``), curriculum GRPO
(``grpo``, the registered RL algorithm ``conductor_curriculum_grpo`` in ``curriculum_grpo``), the trainers' mesh
(``mesh``), online inference (``rollout``, ``evaluate``), the whole pipeline (``pipeline``) and its entry point
(``run``: ``python launch/run.py --config configs/conductor_default.py``). The top layer: it may import
``stages`` (their config sections) and everything below; nothing imports it.
"""

from .actions import ACTIONS, TERMINATE, action_names, register_action
from .curation import CuratedWorkflow, curate_question, power_weights, stability_score, top_k_stable
from .episode import run_action, run_workflow, take_step
from .format import ParseError, ParsedCall, format_results, format_step, parse_policy_output
from .rewards import RewardConfig, score, score_sql
from .search import ExploreConfig, explore_question
from .state import Candidate, Observation, State, apply_observation
from .trajectory import results_mask
from .values import ValueHit, build_value_index, index_database, retrieve_values

__all__ = [
    "ACTIONS",
    "TERMINATE",
    "Candidate",
    "CuratedWorkflow",
    "ExploreConfig",
    "Observation",
    "ParseError",
    "ParsedCall",
    "RewardConfig",
    "State",
    "ValueHit",
    "action_names",
    "apply_observation",
    "build_value_index",
    "curate_question",
    "explore_question",
    "format_results",
    "format_step",
    "index_database",
    "parse_policy_output",
    "power_weights",
    "register_action",
    "results_mask",
    "retrieve_values",
    "run_action",
    "run_workflow",
    "score",
    "score_sql",
    "stability_score",
    "take_step",
    "top_k_stable",
]
