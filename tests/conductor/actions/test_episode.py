import dataclasses

from rewardsql_jax.conductor.actions.episode import run_action, run_workflow, take_step
from rewardsql_jax.conductor.actions.registry import ACTIONS, action_names, register_action
from rewardsql_jax.conductor.actions.state import Observation, State

from _conductor_helpers import scripted_env

WRONG = "SELECT name FROM singer WHERE country = 'Brasil'"
RIGHT = "SELECT name FROM singer WHERE country = 'Brazil'"


def _state(db, env):
    return State(question="How many singers are from Brasil?", db_path=db, env=env)


def test_seven_actions_registered():
    assert set(action_names()) >= {
        "link_schema",
        "retrieve_values",
        "generate_sql",
        "refine_sql",
        "build_sql_steps",
        "select_candidate",
        "terminate",
    }


def test_value_grounded_regeneration_fixes_the_query(music_db):
    env = scripted_env({"generate": WRONG, "generate_with_values": RIGHT})
    s = run_workflow(_state(music_db, env), ["generate_sql", "retrieve_values", "generate_sql", "terminate"])
    assert s.workflow == ("generate_sql", "retrieve_values", "generate_sql", "terminate")
    assert "ok, 0 rows (empty result)" in s.steps[0].observation  # execution feedback in the observation
    assert s.values == ("singer.country = 'Brazil'",)
    assert s.final_sql == RIGHT and s.done
    assert s.action_tokens > 0


def test_refine_sees_error_feedback_and_selection_votes(music_db):
    env = scripted_env(
        {
            "generate": ["SELECT nme FROM singer", "SELECT name FROM singer WHERE age > 28", "SELECT name FROM singer"],
            "refine": "SELECT name FROM singer WHERE age > 28",
        }
    )
    s = run_workflow(
        _state(music_db, env),
        ["generate_sql", "refine_sql", "generate_sql", "generate_sql", "select_candidate", "terminate"],
    )
    assert s.steps[0].observation.splitlines()[1].startswith("error: no such column: nme")
    assert s.candidates[1].ok and s.candidates[1].n_rows == 2
    assert "2 of 3 executable candidates agree" in s.steps[4].observation
    assert s.final_sql == "SELECT name FROM singer WHERE age > 28"


def test_step_limit_and_terminate_without_sql(music_db):
    s = run_workflow(_state(music_db, scripted_env({"generate": RIGHT})), ["link_schema"])
    assert s.done and s.final_sql is None  # finished at the end of the workflow, no SQL produced
    assert "singer" in s.linked_schema


def test_malformed_policy_output_becomes_observation(music_db):
    s = take_step(_state(music_db, scripted_env({"generate": RIGHT})), "<call>generate_sql(</call>")
    assert s.steps[-1].action is None and "malformed call" in s.steps[-1].observation
    s = take_step(s, "<call>refine_sql(extra=1)</call>")
    assert s.steps[-1].action is None and "bad arguments for refine_sql" in s.steps[-1].observation
    s = take_step(s, "<call>refine_sql()</call>")
    assert "no SQL to refine" in s.steps[-1].observation
    assert s.num_calls == 3 and s.workflow == ("refine_sql",)


def test_build_steps_reports_each_cte(music_db):
    cte = "WITH a AS (SELECT * FROM singer WHERE country = 'Brazil')\n\nSELECT COUNT(*) FROM a"
    s = run_action(_state(music_db, scripted_env({"steps": cte})), "build_sql_steps")
    assert "step 1 a: 2 rows" in s.steps[-1].observation and s.current_candidate.n_rows == 1


def test_register_one_callable_adds_an_action(music_db):
    @register_action("count_tables")
    def count_tables(state, **_):
        return Observation(f"{len(state.env.schema(state.db_path).tables)} tables")

    try:
        s = take_step(_state(music_db, scripted_env({"generate": RIGHT})), "<call>count_tables()</call>")
        assert s.steps[-1].observation == "2 tables" and s.workflow == ("count_tables",)
    finally:
        ACTIONS.pop("count_tables")
    assert dataclasses.is_dataclass(s)
