"""``model.scan_layers=true`` in a run: every train stage and the sampler run their layers as one scan and give the
unrolled run's losses and metrics (fp32 summation order apart), a choice a finished run can change on a rerun."""

import json
from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.stages.runner import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
STAGES = "stages=cold_start,sft,prm_labels,prm,rl"


@pytest.mark.slow
def test_a_run_with_scanned_layers_trains_as_the_unrolled_run(tmp_path):
    metrics = {}
    for scan in (False, True):
        cfg = apply_overrides(
            load_config(str(ROOT / "configs" / "smoke.py")),
            [f"run_dir={tmp_path / str(scan)}", STAGES, "model.num_layers=3", f"model.scan_layers={str(scan).lower()}"],
        )
        metrics[scan] = run_pipeline(cfg, log=lambda *_: None)
    plain, scanned = metrics[False], metrics[True]
    sft = [loss for _, loss in scanned["sft"]["loss_curve"]]
    assert sft == pytest.approx([loss for _, loss in plain["sft"]["loss_curve"]], rel=1e-4)
    assert scanned["prm_labels"]["labelled_rollouts"] == plain["prm_labels"]["labelled_rollouts"]
    prm = [point[1] for point in scanned["prm"]["train_loss_curve"]]
    assert prm == pytest.approx([point[1] for point in plain["prm"]["train_loss_curve"]], rel=1e-4)
    for key in ("or_rate_first", "or_rate_last"):
        assert scanned["rl"][key] == pytest.approx(plain["rl"][key])
    recorded = json.loads((tmp_path / "True" / "config.json").read_text())
    assert recorded["model"]["scan_layers"] is True
