"""A finished stage is reused on a rerun only when the settings its artefacts depend on are unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.stages.runner import run_pipeline
from rewardsql_jax.stages.stage_config import StageConfigChanged, changed_keys, refuse_changed, stage_settings

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.py")


def _cfg(run_dir, *overrides):
    return apply_overrides(
        load_config(SMOKE), [f"run_dir={run_dir}", "workers=1", "memory_check=off", "stages=cold_start", *overrides]
    )


def test_a_stage_depends_on_its_own_and_earlier_sections_only():
    cfg = load_config(SMOKE)
    sft = stage_settings(cfg, "sft")
    assert "sft.steps" in sft and "data.questions_per_db" in sft and "seed" in sft
    assert not any(k.startswith(("rl.", "prm.", "inference.")) for k in sft)
    assert "workers" not in stage_settings(cfg, "evaluate") and "rl.stop_after" not in stage_settings(cfg, "rl")
    changed = apply_overrides(cfg, ["sft.steps=99", "rl.steps=7", "workers=3"])
    assert changed_keys(sft, changed, "sft") == ["sft.steps"]


def test_a_changed_algorithm_option_is_a_changed_rl_setting():
    """rl.algorithm_options is recorded one option each with the defaults filled in: a changed option is named,
    the default given explicitly is no change, and a record of an earlier version (flat ``rl.rm_coef``) still
    sees the option change."""
    cfg = load_config(SMOKE)
    rl = stage_settings(cfg, "rl")
    assert rl["rl.algorithm_options.rm_coef"] == 1.0 and rl["rl.algorithm_options.advantage_variant"] == "paper"
    assert "rl.algorithm_options" not in rl
    assert changed_keys(rl, apply_overrides(cfg, ["rl.algorithm_options.rm_coef=1"]), "rl") == []
    zero = apply_overrides(cfg, ["rl.algorithm_options.rm_coef=0"])
    assert changed_keys(rl, zero, "rl") == ["rl.algorithm_options.rm_coef"]
    with pytest.raises(StageConfigChanged, match=r"rl\.algorithm_options\.rm_coef: 1\.0 -> 0\.0"):
        raise refuse_changed("runs/x", "rl", changed_keys(rl, zero, "rl"), rl, zero)
    older = {k: v for k, v in rl.items() if not k.startswith("rl.algorithm_options.")}
    older.update({"rl.algorithm_options": {}, "rl.rm_coef": 1.0, "rl.advantage_variant": "paper", "rl.dpo_beta": 0.1})
    assert changed_keys(older, cfg, "rl") == [] and changed_keys(older, zero, "rl") == ["rl.algorithm_options.rm_coef"]
    dpo = stage_settings(apply_overrides(cfg, ["rl.algorithm=dpo", "rl.algorithm_options.beta=0.2"]), "rl")
    assert dpo["rl.algorithm_options.beta"] == 0.2 and "rl.algorithm_options.rm_coef" not in dpo


def test_a_changed_finished_stage_stops_the_rerun_and_accept_keeps_it(tmp_path):
    run_pipeline(_cfg(tmp_path / "run"), log=lambda *_: None)
    stamp = (tmp_path / "run" / "cold_start" / "train.jsonl").stat().st_mtime_ns
    with pytest.raises(StageConfigChanged, match=r"data.questions_per_db: 12 -> 10.*delete .*cold_start/"):
        run_pipeline(_cfg(tmp_path / "run", "data.questions_per_db=10"), log=lambda *_: None)
    said = []
    run_pipeline(_cfg(tmp_path / "run", "data.questions_per_db=10", "resume=accept_changes"), log=said.append)
    assert any("kept although data.questions_per_db changed" in s for s in said)
    run_pipeline(_cfg(tmp_path / "run", "workers=2", "rl.steps=9"), log=lambda *_: None)  # nothing it depends on
    assert (tmp_path / "run" / "cold_start" / "train.jsonl").stat().st_mtime_ns == stamp


def test_the_cli_says_what_changed_in_one_line(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        SMOKE,
        f"run_dir={tmp_path / 'run'}",
        "workers=1",
        "stages=cold_start",
    ]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    out = subprocess.run(cmd + ["data.n_train_dbs=1"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "error: stage 'cold_start'" in out.stderr and "data.n_train_dbs: 2 -> 1" in out.stderr
