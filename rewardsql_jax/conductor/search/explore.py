"""MCTS exploration of workflows for one training question (SQLConductor Sec. 4.2, Algorithm 1).

The generic ``search.mcts`` runs over orchestration states: a move is the next action, the transition
runs it (LLM actions sample the action model), a node is terminal after ``terminate`` or at
``max_depth`` calls. Simulation from a non-terminal node evaluates "terminate now" (the working SQL),
which costs one SQL execution instead of further LLM calls; the value is the execution reward of
``rewards.py``. Every visited node that holds a SQL candidate yields an explored workflow
(its path, closed by ``terminate``), labelled successful when its SQL matches the gold result.
Successful patterns are then re-executed to estimate their stability (curation, Algorithm 2).
"""

from __future__ import annotations

import dataclasses

from rewardsql_jax.search import MCTSConfig, SearchProblem, mcts_search
from rewardsql_jax.sql import execute

from ..actions.episode import finish, run_action, run_workflow
from ..actions.registry import TERMINATE
from ..actions.state import State
from ..rewards import RewardConfig, score_sql
from .curation import stability_score

SEARCH_ACTIONS = (
    "link_schema",
    "retrieve_values",
    "generate_sql",
    "refine_sql",
    "build_sql_steps",
    "select_candidate",
    TERMINATE,
)
ROLLOUTS = ("generate_sql", "terminate")


@dataclasses.dataclass(frozen=True)
class ExploreConfig:
    """MCTS budget (simulations, depth, UCT constant) and re-executions per successful pattern."""

    num_simulations: int = 8
    max_depth: int = 4
    c: float = 1.0
    selection: str = "uct"
    reexecutions: int = 2
    max_patterns: int = 2
    seed: int = 0
    # simulation from a node without a SQL: write one first (the default policy), so gathering evidence
    # (retrieve_values, link_schema) is valued by the query it leads to, not 0; "terminate" scores the node as is
    rollout: str = "generate_sql"

    def __post_init__(self):
        for name in ("num_simulations", "max_depth", "reexecutions", "max_patterns"):
            if getattr(self, name) < 1:
                raise ValueError(f"ExploreConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.rollout not in ROLLOUTS:
            raise ValueError(f"explore.rollout={self.rollout!r}; choose one of {', '.join(ROLLOUTS)}")


@dataclasses.dataclass(frozen=True)
class QuestionSearch:
    """Exploration result: {workflow: stability}, {workflow: representative state}, explored counts."""

    question_id: int
    scores: dict
    representatives: dict
    explored: int
    successful: int

    @property
    def best_stability(self) -> float:
        return max(self.scores.values(), default=0.0)


def legal_actions(state: State, max_depth: int) -> list:
    """Moves worth searching: no repeated linking / retrieval, refine/terminate need a SQL, select needs two."""
    if state.done or len(state.steps) >= max_depth:
        return []
    out = []
    for a in SEARCH_ACTIONS:
        if (a == "link_schema" and state.linked_schema is not None) or (
            a == "retrieve_values" and state.values is not None
        ):
            continue
        if a in ("refine_sql", TERMINATE) and state.current_candidate is None:
            continue
        if a == "select_candidate" and len(state.candidates) < 2:
            continue
        out.append(a)
    return out


def _walk(node):
    yield node
    for child in node.children.values():
        yield from _walk(child)


def explored_workflows(root) -> dict:
    """{workflow closed by terminate: final SQL} for every materialised node holding a candidate."""
    found: dict[tuple, str | None] = {}
    for node in _walk(root):
        if not node.materialised or node.state is None or node.state.current_candidate is None:
            continue
        wf = node.state.workflow
        if not wf or wf[-1] != TERMINATE:
            wf = wf + (TERMINATE,)
        found.setdefault(wf, finish(node.state).final_sql)
    return found


def _default_policy(state: State, rollout: str) -> State:
    """The simulation's continuation: ``generate_sql`` first when the state holds no SQL yet (``rollout``)."""
    if rollout == "generate_sql" and not state.done and state.current_candidate is None:
        return run_action(state, "generate_sql")
    return state


def explore_question(
    question_id: int,
    state0: State,
    gold_sql: str,
    cfg: ExploreConfig,
    reward_cfg: RewardConfig = RewardConfig(),
    reasoner=None,
) -> QuestionSearch:
    """Algorithm 1 then the stability half of Algorithm 2 for one question (``state0`` bound to an env)."""
    gold = execute(state0.db_path, gold_sql)
    memo = {}

    def judge(sql):
        if sql not in memo:
            memo[sql] = score_sql(state0.db_path, sql, gold, reward_cfg)
        return memo[sql]

    problem = SearchProblem(
        actions=lambda s: legal_actions(s, cfg.max_depth),
        transition=lambda s, a: run_action(s, str(a)),
        reward=lambda s: judge(finish(s).final_sql).reward,
        is_terminal=lambda s: s.done or len(s.steps) >= cfg.max_depth,
        rollout=lambda s, rng: judge(finish(_default_policy(s, cfg.rollout)).final_sql).reward,
    )
    mcts = MCTSConfig(
        num_simulations=cfg.num_simulations,
        c=cfg.c,
        selection=cfg.selection,
        max_depth=cfg.max_depth,
        seed=cfg.seed + question_id,
    )
    result = mcts_search(state0, problem, mcts)
    found = explored_workflows(result.root)
    winners = sorted((wf for wf, sql in found.items() if judge(sql).exact), key=lambda w: (len(w), w))
    scores, reps = {}, {}
    for wf in winners[: cfg.max_patterns]:
        outcomes = []
        for _ in range(cfg.reexecutions):
            st = run_workflow(state0, wf, reasoner=reasoner)
            ok = judge(st.final_sql).exact
            outcomes.append(ok)
            if ok and wf not in reps:
                reps[wf] = st
        scores[wf] = stability_score(outcomes)
    return QuestionSearch(question_id, scores, reps, explored=len(found), successful=len(winners))
