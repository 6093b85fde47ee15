"""A run directory can be moved and resumed from any working directory, and a database that is gone stops
the RL stage with a clear message instead of training on all-zero rewards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.stages.runner import run_pipeline

pytestmark = pytest.mark.slow

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.py")


def _config(run_dir, *overrides):
    return apply_overrides(
        load_config(SMOKE),
        [f"run_dir={run_dir}", "workers=1", "memory_check=off", "data.questions_per_db=6", *overrides],
    )


@pytest.fixture(scope="module")
def moved_run(tmp_path_factory):
    """cold_start + sft started in one working directory with a relative run_dir, then the run directory moved."""
    first, second = tmp_path_factory.mktemp("first_cwd"), tmp_path_factory.mktemp("second_cwd")
    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(first)
        run_pipeline(_config("runs/r", "stages=cold_start,sft"), log=lambda *_: None)
    finally:
        mp.undo()
    moved = second / "elsewhere" / "r"
    shutil.move(str(first / "runs" / "r"), moved)
    records = [json.loads(line) for line in (moved / "cold_start" / "train.jsonl").read_text().splitlines()]
    assert records and all(not Path(r["db_path"]).is_absolute() for r in records)  # stored inside the run dir
    return second, moved


def test_a_moved_run_resumes_from_another_working_directory(moved_run, monkeypatch):
    cwd, moved = moved_run
    monkeypatch.chdir(cwd)
    out = run_pipeline(
        _config("elsewhere/r", "stages=cold_start,sft,rl", "rl.algorithm=grpo_outcome", "rl.steps=1"),
        log=lambda *_: None,
    )
    assert out["rl"]["steps"] == 1
    # the gold queries ran: the databases were found where the run directory now is
    log = [json.loads(line) for line in (moved / "log.jsonl").read_text().splitlines()]
    assert any(r.get("stage") == "rl" and "or_rate" in r for r in log)


def test_a_missing_database_stops_the_rl_stage(moved_run, tmp_path, monkeypatch):
    _, moved = moved_run
    run = tmp_path / "r"
    shutil.copytree(moved, run, ignore=shutil.ignore_patterns("rl"))
    for db in (run / "cold_start" / "data").rglob("*.sqlite"):
        db.unlink()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="database file.*not found.*rewards would all be 0"):
        run_pipeline(_config(str(run), "stages=rl", "rl.algorithm=grpo_outcome", "rl.steps=1"), log=lambda *_: None)
    assert not (run / "rl" / "metrics.json").exists()
