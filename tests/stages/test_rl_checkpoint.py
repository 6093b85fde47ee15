"""RL checkpoints restore params, optimizer state, step and RNG exactly; mismatches are clear errors."""
import jax
import numpy as np
import pytest

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.stages.rl_checkpoint import load_checkpoint, save_checkpoint
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state


def _state(seed=0, hidden=16):
    cfg = ModelConfig(model_type="qwen2", vocab_size=32, hidden_size=hidden, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=hidden // 2,
                      attention_bias=True)
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-2))
    return create_train_state(build_model(cfg, seed=seed), tx, seed=seed, with_reference=True)


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves((state.params, state.opt_state, state.step, state.rng))]


def test_roundtrip_is_exact_and_keeps_the_reference(tmp_path):
    trained = _state(seed=1)
    # Make every saved part non-trivial: perturb params, fake optimizer moments, step and rng.
    trained = trained.replace(params=jax.tree.map(lambda x: x + 0.5, trained.params),
                              opt_state=jax.tree.map(lambda x: x + 1 if np.issubdtype(x.dtype, np.floating) else x + 3,
                                                     trained.opt_state),
                              step=trained.step + 7, rng=trained.rng + 1)
    save_checkpoint(tmp_path / "ck", trained, 7, [{"step": 6, "reward": 0.5}])
    fresh = _state(seed=0)
    state, nxt, hist = load_checkpoint(tmp_path / "ck", fresh)
    assert nxt == 7 and hist == [{"step": 6, "reward": 0.5}]
    for a, b in zip(_leaves(state), _leaves(trained)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    for a, b in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(fresh.ref_params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the reference is the fresh state's
    # Overwriting keeps exactly one checkpoint folder.
    save_checkpoint(tmp_path / "ck", trained, 8, [])
    assert load_checkpoint(tmp_path / "ck", fresh)[1] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_missing_and_mismatched_checkpoints(tmp_path):
    assert load_checkpoint(tmp_path / "none", _state()) is None
    save_checkpoint(tmp_path / "ck", _state(hidden=16), 1, [])
    with pytest.raises(ValueError, match="does not fit"):
        load_checkpoint(tmp_path / "ck", _state(hidden=8))
