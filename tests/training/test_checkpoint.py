"""Checkpoints: kill-and-resume (with the data iterator's position) equals an uninterrupted run, keep-N, NaN stop
with the last good checkpoint (through ``fit``), HF export."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rewardsql_jax.data.grain_pipelines import PipelineConfig, sft_dataset
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.training.checkpoint import Checkpointer, export_pretrained, restore_latest
from rewardsql_jax.training.fit import NonFiniteLossError, fit
from rewardsql_jax.training.step import make_train_step
from rewardsql_jax.training.step_checkpoints import StepCheckpoints

from _train_tiny import tiny_state

K, N = 3, 2


def _records():
    rng = np.random.default_rng(0)
    return [
        {
            "prompt_ids": rng.integers(1, 128, rng.integers(2, 10)).tolist(),
            "target_ids": rng.integers(1, 128, rng.integers(2, 20)).tolist(),
        }
        for _ in range(40)
    ]


def _iterator():
    cfg = PipelineConfig(batch_size=4, seed=5, num_epochs=None, buckets=(32,), group_by_length=2)
    return iter(sft_dataset(_records(), cfg).to_iter_dataset())


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves((state.params, state.opt_state, state.step, state.rng))]


@pytest.fixture(scope="module")
def uninterrupted():
    """K+N steps in one go, with the per-step states' params kept for later comparisons."""
    state = tiny_state()
    step = make_train_step(state.graphdef, "sft")
    it, states = _iterator(), []
    for _ in range(K + N):
        state, _ = step(state, next(it))
        states.append(_leaves(state))
    return step, states


def _run(state, step, it, *, until, ckpt, save_every):
    """Steps until ``state.step == until``, checkpointing the state and the iterator's position every
    ``save_every`` steps and at the end."""
    while int(state.step) < until:
        state, _ = step(state, next(it))
        if int(state.step) % save_every == 0 or int(state.step) == until:
            ckpt.save(state, data_iterator=it)
    ckpt.wait()
    return state


def test_kill_and_resume_reaches_the_same_parameters(tmp_path, uninterrupted):
    """The state and the Grain iterator's position come back from disk: the resumed run draws the batches the
    uninterrupted one drew and reaches its parameters bit for bit."""
    _, states = uninterrupted
    ckpt = Checkpointer(tmp_path / "run", max_to_keep=2)
    state = tiny_state()
    state = _run(state, make_train_step(state.graphdef, "sft"), _iterator(), until=K, ckpt=ckpt, save_every=2)
    ckpt.close()
    del state, ckpt  # the "kill": nothing of the first run survives but the files

    ckpt = Checkpointer(tmp_path / "run", max_to_keep=2)
    assert ckpt.all_steps() == [2, 3]
    it = _iterator()
    state = restore_latest(ckpt, tiny_state(seed=123), data_iterator=it)  # seed: values must come from disk
    assert int(state.step) == K
    for got, want in zip(_leaves(state), states[K - 1]):
        np.testing.assert_array_equal(got, want)
    state = _run(state, make_train_step(state.graphdef, "sft"), it, until=K + N, ckpt=ckpt, save_every=2)
    ckpt.close()
    for got, want in zip(_leaves(state), states[-1]):
        np.testing.assert_array_equal(got, want)  # deterministic CPU: bit-identical


def test_keep_n_deletes_old_checkpoints(tmp_path, uninterrupted):
    step, _ = uninterrupted
    ckpt = Checkpointer(tmp_path / "keep", max_to_keep=2)
    _run(tiny_state(), step, _iterator(), until=5, ckpt=ckpt, save_every=1)
    ckpt.close()
    assert Checkpointer(tmp_path / "keep").all_steps() == [4, 5]
    assert sorted(p.name for p in (tmp_path / "keep").iterdir() if p.name.isdigit()) == ["4", "5"]


class _PoisonAt:
    """Yields the pipeline's batches with per-row weights; the weights of batch ``bad`` are NaN."""

    def __init__(self, bad: int):
        self.it, self.i, self.bad = _iterator(), 0, bad

    def __next__(self):
        self.i += 1
        batch = next(self.it)
        w = np.full((batch.batch_size,), np.nan if self.i == self.bad else 1.0, np.float32)
        return batch.replace(weights=w)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, uninterrupted):
    """Through ``fit`` (the one training loop): the third batch's loss is NaN, its update is not applied, the loop
    stops and the newest checkpoint is the good state after two steps."""
    _, states = uninterrupted
    state, batches = tiny_state(), _PoisonAt(bad=3)
    train_step = make_train_step(state.graphdef, "sft")

    def step(state, i):
        state, m = train_step(state, next(batches))
        return state, {"loss": m["loss"], "loss_is_finite": m["loss_is_finite"]}

    with pytest.raises(NonFiniteLossError, match=r"non-finite loss at step 2.*last good checkpoint is state step 2"):
        fit(
            state,
            step,
            steps=5,
            desc="t",
            checkpoints=StepCheckpoints(tmp_path / "nan"),
            checkpoint_every=2,
            raise_on_nonfinite=True,
        )
    ck = StepCheckpoints(tmp_path / "nan")
    assert ck.ck.all_steps() == [2]
    restored, next_step, _ = ck.restore(tiny_state(seed=9))
    assert next_step == 2
    for got, want in zip(_leaves(restored), states[1]):  # weights of 1.0 leave the SFT loss unchanged
        np.testing.assert_array_equal(got, want)
    ck.close()


def test_export_pretrained_round_trips(tmp_path):
    state = tiny_state(seed=4)
    export_pretrained(state, tmp_path / "hf")
    loaded = from_pretrained(tmp_path / "hf")
    from flax import nnx

    for a, b in zip(jax.tree.leaves(nnx.state(loaded, nnx.Param)), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
