import numpy as np
import pytest

from rewardsql_jax.conductor.rewards import RewardConfig, score
from rewardsql_jax.sql import ExecResult


def _res(rows, ok=True):
    return ExecResult(ok=ok, columns=("a",), rows=tuple(rows), error=None if ok else "boom")


def test_reward_mixes_executability_and_execf1_with_exact_bonus():
    gold = _res([("a",), ("b",)])
    cfg = RewardConfig(lam=0.2, exact_bonus=1.0)
    assert score(_res([("a",), ("b",)]), gold, cfg).reward == pytest.approx(0.2 + 0.8 * 2.0)
    half = score(_res([("a",)]), gold, cfg)  # P=1, R=0.5 -> F1=2/3, not exact
    assert half.exec_f1 == pytest.approx(2 / 3) and not half.exact
    assert half.reward == pytest.approx(0.2 + 0.8 * 2 / 3)
    assert score(_res([], ok=False), gold, cfg).reward == 0.0
    assert score(None, gold, cfg).reward == 0.0
    with pytest.raises(ValueError, match="lam"):
        RewardConfig(lam=1.5)


def test_an_episode_pays_its_call_cost(music_db):
    """rl.reward.call_cost is subtracted per action call from the episode's reward (0 = the paper's reward)."""
    from rewardsql_jax.conductor.actions.state import State, Step
    from rewardsql_jax.conductor.rewards import episode_reward
    from rewardsql_jax.conductor.training.rollout import record
    from rewardsql_jax.data.examples import Example

    gold = _res([("a",)])
    right = score(_res([("a",)]), gold)
    assert episode_reward(right, 4) == right.reward  # default: no cost
    assert episode_reward(right, 4, RewardConfig(call_cost=0.05)) == pytest.approx(right.reward - 0.2)
    sql = "SELECT name FROM singer WHERE country = 'Brazil'"
    ex = Example(1, "music", "q", "", sql, "simple", music_db)
    steps = (Step(reasoning="", call="generate_sql()", action="generate_sql", observation=""),) * 3
    state = State("q", music_db, final_sql=sql, steps=steps)
    free, costly = record(ex, state, 0, RewardConfig()), record(ex, state, 0, RewardConfig(call_cost=0.1))
    assert free.exact and free.reward == pytest.approx(1.8) and costly.reward == pytest.approx(1.8 - 0.3)
    with pytest.raises(ValueError, match="rl.reward.call_cost must be >= 0"):
        RewardConfig(call_cost=-0.1)


def test_step_credit_subtracts_the_value_of_stopping_at_each_decision():
    """rl.credit=step: A_{i,t} = R_i - b_{i,t}; b is the stop value where the state has a SQL, else the group mean."""
    from rewardsql_jax.conductor.rewards import step_advantages, stop_value

    cfg = RewardConfig(call_cost=0.05)
    right, wrong = score(_res([("a",)]), _res([("a",)])), score(_res([("b",)]), _res([("a",)]))
    assert stop_value(right, 1, cfg) == pytest.approx(right.reward - 0.1)  # terminate is the second call
    # group of 2: a retry that fixed a wrong first query (R 1.7), and a first query kept (R 0.1)
    b_wrong = stop_value(wrong, 1, cfg)
    adv = step_advantages([1.7, 0.1], [(None, b_wrong, 1.7), (None, 0.1)], group_size=2)
    np.testing.assert_allclose(adv[0], [1.7 - 0.9, 1.7 - b_wrong, 0.0], rtol=1e-6)
    np.testing.assert_allclose(adv[1], [0.1 - 0.9, 0.0], rtol=1e-6, atol=1e-7)
    assert [a.dtype for a in adv] == [np.float32, np.float32]
    with pytest.raises(ValueError, match="whole groups of 2"):
        step_advantages([1.0, 0.0, 1.0], [(None,)] * 3, group_size=2)


def test_an_episode_record_scores_the_working_sql_before_each_decision(music_db):
    """record(..., decision_sqls): step_values[t] = the reward of stopping at decision t (None: first / no SQL)."""
    from rewardsql_jax.conductor.actions.state import State, Step
    from rewardsql_jax.conductor.training.rollout import record
    from rewardsql_jax.data.examples import Example

    right = "SELECT name FROM singer WHERE country = 'Brazil'"
    wrong = "SELECT name FROM singer"
    ex = Example(1, "music", "q", "", right, "simple", music_db)
    steps = (Step(reasoning="", call="x()", action="generate_sql", observation=""),) * 4
    state = State("q", music_db, final_sql=right, steps=steps)
    cfg = RewardConfig(call_cost=0.1)
    rec = record(ex, state, 0, cfg, decision_sqls=(None, None, wrong, right))
    wrong_r = _reward_of(music_db, wrong, right, cfg)
    assert rec.step_values[:2] == (None, None)
    assert rec.step_values[2] == pytest.approx(wrong_r - 0.3) and rec.step_values[3] == pytest.approx(1.8 - 0.4)
    assert rec.reward == pytest.approx(1.8 - 0.4)
    assert record(ex, state, 0, cfg).step_values == ()  # not asked: nothing extra executed


def _reward_of(db, sql, gold_sql, cfg):
    from rewardsql_jax.conductor.rewards import score_sql
    from rewardsql_jax.sql import execute

    return score_sql(db, sql, execute(db, gold_sql), cfg).reward
