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
