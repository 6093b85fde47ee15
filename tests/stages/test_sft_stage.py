"""The SFT stage on ``training.fit``: with ``sft.checkpoint_every`` a run stopped mid-way resumes from its
checkpoint to the parameters of an uninterrupted run, with independent rows and with schema-prefix groups."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx
from tiny_shapes import tiny_model

from rewardsql_jax.stages import sft
from rewardsql_jax.stages.policy import load_model
from rewardsql_jax.stages.run_config import DataConfig, RunConfig, SFTConfig
from rewardsql_jax.stages.runner import run_pipeline
from rewardsql_jax.training.fit import StoppedEarly

CFG = RunConfig(
    name="sft_test",
    workers=1,
    stages=("cold_start", "sft"),
    data=DataConfig(n_train_dbs=1, n_test_dbs=1, questions_per_db=6, schema_examples=0, max_train=6, max_eval=2),
    model=tiny_model(vocab_size=500, max_len=1024),
    sft=SFTConfig(steps=6, batch_size=2, lr=1e-2, warmup_steps=1, checkpoint_every=2),
)


def _params(run_dir):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(load_model(run_dir / "sft" / "policy")))]


@pytest.mark.slow
@pytest.mark.parametrize("prefix_group", [0, 2])
def test_a_stopped_sft_resumes_to_the_uninterrupted_params(tmp_path, monkeypatch, prefix_group):
    cfg = dataclasses.replace(CFG, sft=dataclasses.replace(CFG.sft, prefix_group=prefix_group))
    whole = run_pipeline(dataclasses.replace(cfg, run_dir=str(tmp_path / "whole")), log=lambda *_: None)["sft"]
    assert whole["resumed_from_step"] == 0 and whole["prefix_group"] == prefix_group
    assert whole["loss_curve"][-1][1] < whole["loss_curve"][0][1]  # it learns

    real_fit = sft.fit
    monkeypatch.setattr(sft, "fit", lambda *a, **kw: real_fit(*a, **{**kw, "stop_after": 3}))
    stopped = dataclasses.replace(cfg, run_dir=str(tmp_path / "stopped"))
    with pytest.raises(StoppedEarly, match=r"sft stopped after 3 step\(s\) at step 3/6"):
        run_pipeline(stopped, log=lambda *_: None)
    monkeypatch.setattr(sft, "fit", real_fit)
    again = run_pipeline(stopped, log=lambda *_: None)["sft"]
    assert again["resumed_from_step"] == 3  # the checkpoint written when it stopped
    assert again["loss_curve"] == whole["loss_curve"]
    for got, want in zip(_params(tmp_path / "stopped"), _params(tmp_path / "whole")):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("prefix_group", [0, 2])
def test_padding_each_step_to_a_ladder_of_lengths_changes_no_loss(tmp_path, monkeypatch, prefix_group):
    """``sft.length_buckets=3`` pads each step to the shortest of up to 3 lengths that holds it: several batch
    shapes (so several compiles), the same loss curve and parameters as one length for the whole run."""
    shapes = {1: set(), 3: set()}
    real_batches = sft._batches

    def recording(encoded, keys, s, seed, pad):
        make = real_batches(encoded, keys, s, seed, pad)

        def batch(i):
            b, n = make(i)
            shapes[s.length_buckets].add(tuple(np.shape(x) for x in jax.tree.leaves(b)))
            return b, n

        return batch

    monkeypatch.setattr(sft, "_batches", recording)
    curves = {}
    for buckets in (1, 3):
        s = dataclasses.replace(CFG.sft, prefix_group=prefix_group, length_buckets=buckets, steps=8)
        cfg = dataclasses.replace(CFG, sft=s, run_dir=str(tmp_path / f"b{buckets}"))
        curves[buckets] = run_pipeline(cfg, log=lambda *_: None)["sft"]["loss_curve"]
    assert len(shapes[1]) == 1 and len(shapes[3]) >= 2
    np.testing.assert_allclose([v for _, v in curves[3]], [v for _, v in curves[1]], rtol=1e-5)
    for got, want in zip(_params(tmp_path / "b3"), _params(tmp_path / "b1")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
