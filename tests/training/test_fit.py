"""``training.fit``: resume after an early stop reaches the uninterrupted run's parameters bit for bit; the
checkpoint cadence; a non-finite loss stops the loop when asked, leaving the last good checkpoint."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rewardsql_jax.training.fit import NonFiniteLossError, StoppedEarly, fit
from rewardsql_jax.training.step import make_train_step
from rewardsql_jax.training.step_checkpoints import StepCheckpoints

from _train_tiny import sft_batch, tiny_state

STEPS = 5


def _step_fn(state, *, poison_at=None):
    train_step = make_train_step(state.graphdef, "sft")

    def step(state, i):
        batch = sft_batch(seed=i)  # what a step trains on depends on i alone
        if i == poison_at:
            batch = batch.replace(weights=np.full(batch.input_ids.shape[0], np.nan, np.float32))
        state, m = train_step(state, batch)
        m = jax.device_get(m)
        return state, {"loss": float(m["loss"]), "loss_is_finite": bool(m["loss_is_finite"])}

    return step


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves((state.params, state.opt_state, state.step))]


def test_stop_and_resume_equals_the_uninterrupted_run(tmp_path):
    state = tiny_state()
    full = fit(state, _step_fn(state), steps=STEPS, desc="t")
    assert [h["step"] for h in full.history] == list(range(STEPS)) and full.resumed_from == 0

    state = tiny_state()
    with pytest.raises(StoppedEarly, match=r"t stopped after 2 step\(s\) at step 2/5 \(stop_after\)"):
        fit(
            state,
            _step_fn(state),
            steps=STEPS,
            desc="t",
            checkpoints=StepCheckpoints(tmp_path, name="t"),
            stop_after=2,
            checkpoint_every=100,
        )
    state = tiny_state(seed=7)  # values must come from the checkpoint
    said = []
    again = fit(
        state, _step_fn(state), steps=STEPS, desc="t", checkpoints=StepCheckpoints(tmp_path, name="t"), say=said.append
    )
    assert again.resumed_from == 2 and said == [f"[t] resumed from step 2/5 (checkpoint in {tmp_path / 'checkpoint'})"]
    assert [h["step"] for h in again.history] == list(range(STEPS))
    assert [h["loss"] for h in again.history] == [h["loss"] for h in full.history]
    for got, want in zip(_leaves(again.state), _leaves(full.state)):
        np.testing.assert_array_equal(got, want)


def test_checkpoint_cadence_and_the_log(tmp_path):
    state, logged = tiny_state(), []
    ck = StepCheckpoints(tmp_path, async_save=False)
    fit(state, _step_fn(state), steps=STEPS, desc="t", checkpoints=ck, checkpoint_every=2, log=logged.append)
    assert StepCheckpoints(tmp_path).ck.all_steps() == [4, 5]  # every 2nd and the last; the 2 newest kept
    assert [r["step"] for r in logged] == list(range(STEPS))


def test_device_records_are_fetched_only_on_logged_steps():
    state = tiny_state()
    train_step = make_train_step(state.graphdef, "sft")

    def step(state, i):
        state, m = train_step(state, sft_batch(seed=i))
        return state, {"loss": m["loss"]}  # a device scalar: fit fetches it when it logs

    run = fit(state, step, steps=STEPS, desc="t", log_every=2)
    assert [h["step"] for h in run.history] == [0, 2, 4]
    assert all(type(h["loss"]) is float for h in run.history)


def test_a_non_finite_loss_stops_when_asked(tmp_path):
    state = tiny_state()
    with pytest.raises(NonFiniteLossError, match="non-finite loss at step 3.*last good checkpoint is state step 2"):
        fit(
            state,
            _step_fn(state, poison_at=3),
            steps=STEPS,
            desc="t",
            checkpoints=StepCheckpoints(tmp_path),
            checkpoint_every=2,
            raise_on_nonfinite=True,
        )
    state = tiny_state()
    run = fit(state, _step_fn(state, poison_at=3), steps=STEPS, desc="t")  # RL's choice: skip the update, go on
    assert [h["loss_is_finite"] for h in run.history] == [True, True, True, False, True]
    assert int(run.state.step) == STEPS - 1  # the NaN guard did not apply step 3
