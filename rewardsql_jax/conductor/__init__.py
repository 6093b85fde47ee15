"""SQLConductor (papers/sqlconductor.md): a small policy orchestrates text-to-SQL actions step by step.

Subpackages by concept (each imports only the ones before it, and the top-level ``data`` / ``rewards``):

* ``actions``    the action space and what runs it: registry (``registry``), orchestration state (``state``),
                 tagged trajectory format and parser (``format``), one step / a fixed workflow (``episode``),
                 schema linking, value retrieval, the frozen action models (``models``, ``prompts``, ``data``,
                 ``env``), batched model calls (``lm``, ``batching``)
* ``search``     MCTS workflow exploration (``explore``), curation with stability weights (``curation``),
                 reasoning augmentation (``reasoning``)
* ``training``   the policy's token view (``trajectory``, ``tokenizer``), the online loop (``rollout``),
                 stability-weighted SFT (``sft``), curriculum GRPO (``grpo``, the registered RL algorithm
                 ``conductor_curriculum_grpo`` in ``curriculum_grpo``), the trainers' mesh (``mesh``)
* ``evaluation`` online evaluation and its evidence (``evaluate``), the printed table and figure (``report``)

At the top: questions (``data``), the execution reward (``rewards``), the config (``config``), the pipeline's
stages (``pipeline``) and its entry point (``run``: ``python launch/run.py --config configs/conductor_default.py``).
The top layer: it may import ``stages`` (their config sections) and everything below; nothing imports it.
"""

from .actions.episode import run_action, run_workflow, take_step
from .actions.format import ParseError, ParsedCall, format_results, format_step, parse_policy_output
from .actions.registry import ACTIONS, TERMINATE, action_names, register_action
from .actions.state import Candidate, Observation, State, apply_observation
from .actions.values import ValueHit, build_value_index, index_database, retrieve_values
from .rewards import RewardConfig, score, score_sql
from .search.curation import CuratedWorkflow, curate_question, power_weights, stability_score, top_k_stable
from .search.explore import ExploreConfig, explore_question
from .training.trajectory import results_mask

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
