import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.losses import aggregate

LOSS = jnp.array([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0]])
MASK = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("grpo", ((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("bnpo", 10 / 4),
        ("token_mean", 10 / 4),
        ("dapo", 10 / 4),
        ("dr_grpo", 10 / (2 * 4)),
    ],
)
def test_modes_by_hand(mode, expected):
    assert float(aggregate(LOSS, MASK, mode)) == pytest.approx(expected, rel=1e-6)


def test_dr_grpo_max_len_and_dapo_global_count():
    assert float(aggregate(LOSS, MASK, "dr_grpo", max_len=10)) == pytest.approx(10 / 20)
    # dapo with the token count of the whole generation batch (TRL num_items_in_batch)
    assert float(aggregate(LOSS, MASK, "dapo", num_items_in_batch=8.0)) == pytest.approx(10 / 8)


def test_empty_rows_and_masks_do_not_divide_by_zero():
    empty = jnp.zeros_like(MASK)
    for mode in ("grpo", "bnpo", "dapo", "dr_grpo", "token_mean"):
        assert float(aggregate(LOSS, empty, mode)) == 0.0
    one_row = MASK.at[1].set(0.0)
    np.testing.assert_allclose(aggregate(LOSS, one_row, "grpo"), 2.0 / 2)  # row mean 2, empty row counts 0


def test_unknown_mode_names_the_choices():
    with pytest.raises(ValueError, match="dr_grpo"):
        aggregate(LOSS, MASK, "seq_mean")
