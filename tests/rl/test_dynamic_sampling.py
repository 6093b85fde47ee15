"""DAPO dynamic sampling: which groups count as informative, and which rows the batch keeps."""

import numpy as np
import pytest

from rewardsql_jax.rl.dynamic_sampling import choose_groups, group_rows, informative_groups
from rewardsql_jax.stages.run_config import RLConfig, RunConfig


def test_informative_groups_have_reward_spread():
    rewards = [0, 0, 0, 1, 1, 1, 0.5, 0.5]
    np.testing.assert_array_equal(informative_groups(rewards, 2), [False, True, False, False])


def test_informative_groups_first_then_fill_in_draw_order():
    flags = [np.array([False, True, False]), np.array([True, False, True])]
    assert choose_groups(flags, 3) == [(0, 1), (1, 0), (1, 2)]
    assert choose_groups(flags, 5) == [(0, 1), (1, 0), (1, 2), (0, 0), (0, 2)]
    # draws of 3 groups x 2 samples = 6 rows each
    assert group_rows([(0, 1), (1, 0)], 2, [6, 6]) == [2, 3, 6, 7]


def test_filter_groups_needs_a_group_normalised_algorithm():
    with pytest.raises(ValueError, match="filter_groups"):
        RunConfig(rl=RLConfig(algorithm="reinforce_pp", filter_groups=True))
    RunConfig(rl=RLConfig(algorithm="grpo_outcome", filter_groups=True))
