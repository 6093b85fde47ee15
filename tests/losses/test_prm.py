import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax import losses

LOGITS = jnp.array([[[2.0, -1.0], [0.0, 0.0], [5.0, 5.0]], [[-3.0, 1.0], [9.0, -9.0], [1.0, 2.0]]])
LABELS = jnp.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
MASK = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def test_value_by_hand():
    x = np.asarray(LOGITS, np.float64)
    p = 1 / (1 + np.exp(-(x[..., 0] - x[..., 1])))
    y, m = np.asarray(LABELS), np.asarray(MASK)
    bce = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    loss, metrics = jax.jit(losses.prm)(LOGITS, LABELS, MASK)
    assert float(loss) == pytest.approx((bce * m).sum() / m.sum(), rel=1e-6)
    assert float(metrics["num_steps"]) == 5
    assert float(metrics["accuracy"]) == pytest.approx(np.mean(((p > 0.5) == (y > 0.5))[m > 0]))
    np.testing.assert_allclose(losses.step_scores(LOGITS), p, rtol=1e-6)


def test_masked_steps_do_not_matter():
    other = LOGITS.at[0, 2].set(jnp.array([-50.0, 50.0]))
    np.testing.assert_allclose(losses.prm(LOGITS, LABELS, MASK)[0], losses.prm(other, LABELS, MASK)[0])
    g = jax.grad(lambda x: losses.prm(x, LABELS, MASK)[0])(LOGITS)
    assert float(jnp.abs(g[0, 2]).max()) == 0.0


def test_stable_for_extreme_logits():
    big = jnp.array([[[1e4, -1e4]]])
    loss, _ = losses.prm(big, jnp.array([[0.0]]), jnp.array([[1.0]]))
    assert float(loss) == pytest.approx(2e4, rel=1e-6)  # finite, not inf/nan


def test_shape_errors():
    with pytest.raises(ValueError, match="2 logits"):
        losses.prm(jnp.zeros((2, 3, 3)), LABELS, MASK)
    with pytest.raises(ValueError, match="labels"):
        losses.prm(LOGITS, LABELS[:, :2], MASK)
    with pytest.raises(ValueError, match="tag_logits must be a 3-D"):
        losses.prm(LOGITS[0], LABELS, MASK)


def test_pos_weight_by_hand():
    x = np.asarray(LOGITS, np.float64)
    p = 1 / (1 + np.exp(-(x[..., 0] - x[..., 1])))
    y, m = np.asarray(LABELS), np.asarray(MASK)
    w = 3.5
    bce = -(w * y * np.log(p) + (1 - y) * np.log(1 - p))
    loss, metrics = jax.jit(lambda *a: losses.prm(*a, pos_weight=w))(LOGITS, LABELS, MASK)
    assert float(loss) == pytest.approx((bce * m).sum() / m.sum(), rel=1e-6)
    assert float(metrics["num_steps"]) == 5  # the weight scales the loss, not the step count
    # one positive and one negative step: w scales exactly the positive one
    one = jnp.array([[[0.0, 0.0], [0.0, 0.0]]])
    loss, _ = losses.prm(one, jnp.array([[1.0, 0.0]]), jnp.ones((1, 2)), pos_weight=3.0)
    assert float(loss) == pytest.approx((3.0 * np.log(2) + np.log(2)) / 2, rel=1e-6)
    assert float(losses.prm(LOGITS, LABELS, MASK, pos_weight=1.0)[0]) == float(losses.prm(LOGITS, LABELS, MASK)[0])
    with pytest.raises(ValueError, match="pos_weight"):
        losses.prm(LOGITS, LABELS, MASK, pos_weight=0.0)


def test_pos_weight_matches_torch_bce_with_logits():
    torch = pytest.importorskip("torch")
    w = 4.0
    ref = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor(np.asarray(LOGITS[..., 0] - LOGITS[..., 1])),
        torch.tensor(np.asarray(LABELS)),
        reduction="none",
        pos_weight=torch.tensor(w),
    )
    m = np.asarray(MASK)
    expected = float((ref.numpy() * m).sum() / m.sum())
    assert float(losses.prm(LOGITS, LABELS, MASK, pos_weight=w)[0]) == pytest.approx(expected, rel=1e-6)
