"""``plan=true`` override parsing for launch/run.py (no compilation)."""

import pytest

from rewardsql_jax.planning import split_plan_overrides


def test_plan_options_are_split_from_overrides():
    opts, rest = split_plan_overrides(["rl.steps=3", "plan=true", "plan.devices=8", "plan.hbm=v5p", "seed=1"])
    assert opts == {"plan": "true", "devices": "8", "hbm": "v5p"}
    assert rest == ["rl.steps=3", "seed=1"]


def test_no_plan_leaves_overrides_alone():
    assert split_plan_overrides(["rl.steps=3"]) == (None, ["rl.steps=3"])
    assert split_plan_overrides(["plan=false", "seed=2"]) == (None, ["seed=2"])


def test_bad_plan_options_are_errors():
    with pytest.raises(ValueError, match="plan.devices"):
        split_plan_overrides(["plan=true", "plan.device=8"])
    with pytest.raises(ValueError, match="need plan=true"):
        split_plan_overrides(["plan.hbm=v5p"])
