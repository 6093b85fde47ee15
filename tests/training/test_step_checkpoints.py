"""Step checkpoints (Orbax + step/history meta) restore params, optimizer state, step and RNG exactly."""

import jax
import numpy as np
import pytest

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step_checkpoints import StepCheckpoints


def _state(seed=0, hidden=16):
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=32,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        attention_bias=True,
    )
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-2))
    return create_train_state(build_model(cfg, seed=seed), tx, seed=seed, with_reference=True)


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves((state.params, state.opt_state, state.step, state.rng))]


def _perturbed(state, step):
    return state.replace(
        params=jax.tree.map(lambda x: x + 0.5, state.params),
        opt_state=jax.tree.map(lambda x: x + 1 if np.issubdtype(x.dtype, np.floating) else x + 3, state.opt_state),
        step=state.step + step,
        rng=state.rng + 1,
    )


def test_roundtrip_is_exact_with_its_step_and_history(tmp_path):
    trained = _perturbed(_state(seed=1), 7)
    ck = StepCheckpoints(tmp_path)
    ck.save(trained, 9, [{"step": 8, "reward": 0.5}])  # RL step 9 > state step 7 (two skipped updates)
    ck.close()
    fresh = _state(seed=0)
    ck = StepCheckpoints(tmp_path)
    state, nxt, hist = ck.restore(fresh)
    assert nxt == 9 and hist == [{"step": 8, "reward": 0.5}]
    for a, b in zip(_leaves(state), _leaves(trained)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    # A later save at the same state step (NaN-skipped update) only rewrites the meta; old metas are pruned.
    ck.save(trained, 10, [])
    assert ck.restore(fresh)[1] == 10
    for s in (8, 9, 10):
        ck.save(_perturbed(_state(seed=1), s), s + 2, [])
    ck.wait()
    assert ck.restore(fresh)[1] == 12
    assert sorted(int(p.stem) for p in (tmp_path / "checkpoint_meta").glob("*.json")) == sorted(ck.ck.all_steps())
    ck.close()


def test_missing_and_mismatched_checkpoints(tmp_path):
    ck = StepCheckpoints(tmp_path / "a")
    assert ck.restore(_state()) is None
    ck.save(_perturbed(_state(hidden=16), 1), 1, [])
    ck.close()
    with pytest.raises(ValueError, match="does not fit"):
        StepCheckpoints(tmp_path / "a").restore(_state(hidden=8))


def test_a_damaged_newest_checkpoint_is_reported_and_the_previous_one_used(tmp_path):
    ck = StepCheckpoints(tmp_path, async_save=False)
    older, newer = _perturbed(_state(seed=1), 1), _perturbed(_perturbed(_state(seed=1), 2), 0)
    ck.save(older, 1, [{"step": 0}])
    ck.save(newer, 2, [{"step": 0}, {"step": 1}])
    ck.close()
    # truncate every array file of the newest checkpoint, as a kill during a non-atomic copy would
    files = [
        p
        for p in (tmp_path / "checkpoint" / "2").rglob("*")
        if p.is_file() and p.stat().st_size > 0 and "metadata" not in p.name
    ]
    assert files
    for p in files:
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
    said = []
    state, nxt, hist = StepCheckpoints(tmp_path).restore(_state(seed=0), log=said.append)
    assert nxt == 1 and hist == [{"step": 0}]
    for a, b in zip(_leaves(state), _leaves(older)):
        np.testing.assert_array_equal(a, b)
    assert any("checkpoint 2" in s and "cannot be read" in s for s in said)
    assert any("resuming from checkpoint 1" in s for s in said)
    assert (tmp_path / "checkpoint" / "2").exists()  # left for inspection, nothing deleted
