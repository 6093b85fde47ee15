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
