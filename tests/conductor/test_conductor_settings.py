"""A rerun into a run_dir whose finished stages ran with other settings is refused, naming the changed keys."""

import dataclasses
from pathlib import Path

import pytest

from rewardsql_jax.conductor.context import setup
from rewardsql_jax.config import load_config
from rewardsql_jax.stages.stage_config import StageConfigChanged

ROOT = Path(__file__).resolve().parents[2]


def test_changed_settings_of_a_finished_stage_are_refused(tmp_path):
    cfg = dataclasses.replace(load_config(ROOT / "configs" / "conductor_smoke.py"), run_dir=str(tmp_path / "run"))
    run = setup(cfg, lambda *_: None)
    run.finish("search", {"questions": 0})
    setup(dataclasses.replace(cfg, checkpoint_every=7), lambda *_: None)  # how it runs, not what it makes
    changed = dataclasses.replace(cfg, action=dataclasses.replace(cfg.action, temperature=0.0), seed=3)
    with pytest.raises(StageConfigChanged, match=r"stage 'search'.*action\.temperature: 0\.7 -> 0\.0.*seed: 0 -> 3"):
        setup(changed, lambda *_: None)
