"""Item 4 of issue 21: the RL stage loads the PRM only when the configured reward reads it (``uses_prm``)."""

from __future__ import annotations

import types

import pytest

from rewardsql_jax.stages.rl.setup import prm_scorer_if_needed
from rewardsql_jax.stages.run_config import RLConfig, RunConfig


def _ctx(tmp_path, **rl):
    return types.SimpleNamespace(config=RunConfig(rl=RLConfig(**rl)), run_dir=tmp_path)


FULL_MODEL_STATE = types.SimpleNamespace(frozen=None)  # a state without LoRA: the PRM would be loaded whole


@pytest.mark.parametrize(
    "rl",
    [
        dict(algorithm="grpo", algorithm_options=dict(advantage_variant="released", rm_coef=0.0)),
        dict(algorithm="grpo_outcome"),
        dict(algorithm="reinforce_pp", samples_per_prompt=1),
    ],
)
def test_no_prm_is_loaded_when_the_reward_does_not_use_it(tmp_path, rl):
    assert (
        prm_scorer_if_needed(_ctx(tmp_path, **rl), FULL_MODEL_STATE) is None
    )  # no prm/model in tmp_path: a load would raise


@pytest.mark.parametrize(
    "rl",
    [
        dict(algorithm="grpo", algorithm_options=dict(advantage_variant="released", rm_coef=0.5)),
        dict(algorithm="grpo", algorithm_options=dict(advantage_variant="paper", rm_coef=0.0)),  # paper ignores rm_coef
        dict(algorithm="grpo"),
    ],
)
def test_the_prm_is_loaded_when_the_reward_uses_it(tmp_path, rl):
    with pytest.raises(FileNotFoundError, match="needs the PRM"):
        prm_scorer_if_needed(_ctx(tmp_path, **rl), FULL_MODEL_STATE)
