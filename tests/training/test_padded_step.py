"""Any batch on any mesh (issue 21 item 5): a batch whose rows do not divide the mesh's data x fsdp devices is
padded with masked rows, and the train step of every loss family (SFT, PRM, GRPO incl. the shared-prefix batch,
REINFORCE++, DPO, RS) and the sampler give what the unpadded batch gives on one device.

Runs tests/training/padded_step_worker.py in a subprocess with 8 simulated CPU devices (XLA_FLAGS must precede
the jax import). Tolerances as tests/training/test_sharded_step.py: sharding only changes the fp32 summation
order; losses 1e-6 abs, metrics 1e-6 relative to max(1, |value|), parameters after one AdamW step 1e-5 abs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewardsql_jax.training.batch import GroupedRLBatch, RLBatch
from rewardsql_jax.training.padding import pad_batch, padded_rows

WORKER = Path(__file__).parent / "padded_step_worker.py"


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_padded_train_step_equals_the_unpadded_single_device_step(report):
    cases = {k: v for k, v in report["train"].items() if not k.startswith("control")}
    assert len(cases) == 12  # 9 losses / batch layouts on 4 devices, 3 of them on 8
    for name, row in cases.items():
        assert row["rows"] % row["shards"], name  # the batch does not split over the devices as it is
        assert row["finite"] and row["same_metric_names"], name
        assert row["loss_diff"] < 1e-6, (name, row)
        assert row["max_metric_diff"] < 1e-6, (name, row)
        assert row["moved"] > 1e-4 and row["max_param_diff"] < 1e-5, (name, row)


def test_padding_rows_taken_as_real_rows_would_change_the_step(report):
    """Control: the same padded batch without the step's row bookkeeping gives another loss and parameters."""
    control = report["train"]["control_padding_as_rows"]
    assert control["loss_diff"] > 1e-2 and control["max_param_diff"] > 1e-5  # beyond the tolerances above


def test_sharded_sampler_with_padded_prompts_equals_the_unsharded_sampler(report):
    assert len(report["sampler"]) == 4
    for name, row in report["sampler"].items():
        assert row["params_sharded"], name
        assert row["rows"][0] == row["rows"][1], name  # padding rows dropped from the result
        assert row["same_tokens"] and row["same_finished"] and row["same_lengths"] and row["same_steps"], name
        assert row["max_logprob_diff"] < 1e-5, (name, row)


def test_pad_batch_appends_masked_copies_so_each_micro_batch_ends_with_its_padding():
    b, t = 6, 5
    ids = np.arange(b * t, dtype=np.int32).reshape(b, t)
    batch = RLBatch(ids, np.ones((b, t), np.int32), np.ones((b, t), np.float32), advantages=np.ones(b, np.float32))
    assert padded_rows(6, 2, 4) == 8 and padded_rows(6, 1, 4) == 8 and padded_rows(8, 2, 4) == 8
    assert pad_batch(batch, 2, 3) is batch  # 3 rows per micro-batch split over 3 devices: nothing to pad
    padded = pad_batch(batch, 2, 4)
    assert padded.batch_size == 8
    np.testing.assert_array_equal(padded.input_ids[6:], ids[[5, 5]])
    assert padded.completion_mask[6:].sum() == 0 and padded.advantages[6:].sum() == 0
    assert padded.completion_mask[:6].all()
    # the step's micro-batch m takes rows m, m + 2, ...: real rows first, then the padding row
    micro = [np.arange(8)[m::2] for m in range(2)]
    assert [list(r) for r in micro] == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_pad_batch_pads_grouped_batches_by_prompt():
    p, g, lp, lc = 3, 2, 4, 3
    batch = GroupedRLBatch(
        np.ones((p, lp), np.int32),
        np.ones((p, lp), np.int32),
        np.ones((p, g, lc), np.int32),
        np.ones((p, g, lc), np.float32),
        advantages=np.ones((p, g), np.float32),
    )
    padded = pad_batch(batch, 1, 4).validate()  # left-padded prompt layout kept on the copies
    assert padded.batch_size == 4 and padded.completion_ids.shape == (4, g, lc)
    assert padded.completion_mask[3].sum() == 0 and padded.advantages[3].sum() == 0


def test_prm_scorer_on_a_sharded_model_equals_the_unsharded_scorer(report):
    """Issue 21 item 1: the PRM scorer's weights split over 8 devices, its rows spread over them (3 rows padded
    to 8), the same step scores as one device."""
    row = report["prm_scorer"]
    assert row["placement"] == {"devices": 8, "whole_matrices": 0} and row["batch_size"] == 8
    assert row["steps"] == [[2, 2], [3, 3], [1, 1]]
    assert row["max_diff"] < 1e-6
