import pytest

from rewardsql_jax.conductor.actions.state import State
from rewardsql_jax.conductor.search.explore import ExploreConfig, explore_question, legal_actions
from rewardsql_jax.conductor.search.reasoning import template_reasoning

from _conductor_helpers import scripted_env

GOLD = "SELECT name FROM singer WHERE country = 'Brazil'"


def _state(db):
    env = scripted_env(
        {
            "generate": "SELECT name FROM singer WHERE country = 'Brasil'",
            "generate_with_values": GOLD,
            "refine": "SELECT name FROM singer WHERE country = 'Brasil'",
            "steps": "SELECT name FROM singer",
        }
    )
    return State(question="Singers from Brasil?", db_path=db, env=env)


def test_legal_actions_prune_repeats_and_need_sql(music_db):
    s = _state(music_db)
    assert legal_actions(s, 5) == ["link_schema", "retrieve_values", "generate_sql", "build_sql_steps"]
    assert legal_actions(s, 0) == []


def test_mcts_finds_value_grounded_workflow(music_db):
    cfg = ExploreConfig(num_simulations=40, max_depth=3, reexecutions=2, max_patterns=3)
    res = explore_question(0, _state(music_db), GOLD, cfg, reasoner=template_reasoning)
    assert res.successful >= 1 and res.explored > res.successful
    assert ("retrieve_values", "generate_sql", "terminate") in res.scores
    # every successful pattern retrieves values before writing SQL (the scripted model reads them); the scripted model is deterministic
    for wf, p in res.scores.items():
        first_sql = min(i for i, a in enumerate(wf) if a in ("generate_sql", "build_sql_steps"))
        assert "retrieve_values" in wf[:first_sql]
        assert p == 1.0
        rep = res.representatives[wf]
        assert rep.workflow == wf and rep.final_sql == GOLD and all(st.reasoning for st in rep.steps)


def test_simulation_writes_a_sql_so_gathering_evidence_is_valued(music_db):
    """A node without SQL is simulated by writing one (explore.rollout="generate_sql"): retrieving values first is
    valued by the query it leads to. Scoring such a node as it is ("terminate") gives it 0, and a small budget
    never comes back to it."""
    wanted = ("retrieve_values", "generate_sql", "terminate")
    found = {}
    for rollout in ("generate_sql", "terminate"):
        cfg = ExploreConfig(num_simulations=8, max_depth=3, reexecutions=1, max_patterns=2, rollout=rollout)
        found[rollout] = explore_question(0, _state(music_db), GOLD, cfg, reasoner=template_reasoning).scores
    assert found["generate_sql"].get(wanted) == 1.0
    assert wanted not in found["terminate"]


def test_unknown_rollout_is_refused():
    with pytest.raises(ValueError, match="explore.rollout='random'; choose one of generate_sql, terminate"):
        ExploreConfig(rollout="random")
