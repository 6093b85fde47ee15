"""ScalarLog writes TensorBoard scalar event files that TensorBoard's own reader reads back exactly."""

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rewardsql_jax.training.metrics_log import ScalarLog, scalar_fields, summary_line


def read_scalars(path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalar_fields_keeps_numbers_and_flattens_dicts():
    record = {
        "stage": "rl",
        "step": 3,
        "loss": 0.5,
        "tokens": 12,
        "ok": True,
        "note": "x",
        "curve": [1, 2],
        "none": None,
        "np": np.float32(0.25),
        "ex": {"greedy": 0.75, "by": {"simple": 1}},
    }
    assert scalar_fields(record) == {"loss": 0.5, "tokens": 12.0, "np": 0.25, "ex/greedy": 0.75, "ex/by/simple": 1.0}
    assert scalar_fields({"loss": 1}, "final/") == {"final/loss": 1.0}


def test_summary_line_is_one_line():
    line = summary_line({"stage": "sft", "step": 10, "loss": 0.421, "grad_norm": 1.2034, "tokens": 7, "tag": "a"})
    assert line == "[sft] step 10: loss=0.421 grad_norm=1.203 tokens=7"
    assert "\n" not in line


def test_scalar_log_round_trip(tmp_path):
    with ScalarLog(tmp_path) as log:
        for step, loss in [(0, 2.0), (10, 1.5), (20, 0.25)]:
            assert log.write("sft", {"stage": "sft", "step": step, "loss": loss, "why": "text"}) == 1
        log.write("rl", {"reward": 0.5, "nested": {"or": 0.125}}, step=4)
        log.write("sft", {"final_loss": 0.25}, prefix="final/")  # no step: the run's last step
        assert log.write("sft", {"only": "strings"}, step=30) == 0
    assert read_scalars(tmp_path / "sft") == {
        "loss": [(0, 2.0), (10, 1.5), (20, 0.25)],
        "final/final_loss": [(20, 0.25)],
    }
    assert read_scalars(tmp_path / "rl") == {"reward": [(4, 0.5)], "nested/or": [(4, 0.125)]}


def test_scalar_log_rejects_a_non_int_step(tmp_path):
    with ScalarLog(tmp_path) as log, pytest.raises(ValueError, match="step must be an int"):
        log.write("sft", {"loss": 1.0}, step=1.5)
