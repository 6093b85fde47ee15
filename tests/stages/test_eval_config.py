"""configs/spider_dev_eval.py on the real Spider dev set with the gold SQL as predictions: 100% EX."""

from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.stages.runner import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
SPIDER = ROOT.parent / "shared" / "data" / "spider"
pytestmark = pytest.mark.skipif(not SPIDER.exists(), reason="../shared/data/spider not present")


def _gold_file(tmp_path, n=None):
    lines = (SPIDER / "dev_gold.sql").read_text().splitlines()
    present = [ln for ln in lines if (SPIDER / "database" / ln.split("\t")[1]).exists()]
    path = tmp_path / "gold.txt"
    path.write_text("\n".join(present[:n] if n else present) + "\n")
    return path


def test_gold_predictions_score_100_percent(tmp_path):
    cfg = apply_overrides(
        load_config(ROOT / "configs" / "spider_dev_eval.py"),
        [f"data.root={SPIDER}", f"run_dir={tmp_path / 'run'}", f"inference.predictions_file={_gold_file(tmp_path)}"],
    )
    results = run_pipeline(cfg, log=lambda *_: None)
    ev = results["evaluate"]
    assert ev["questions"] == 972  # wta_1 is missing from ../shared/data
    assert ev["ex"]["predictions"] == 1.0
    assert set(ev["ex_by_difficulty"]["predictions"]) == {"easy", "medium", "hard", "extra"}
    assert (tmp_path / "run" / "evaluate" / "predict_spider.txt").exists()


def test_short_predictions_file_is_a_clear_error(tmp_path):
    cfg = apply_overrides(
        load_config(ROOT / "configs" / "spider_dev_eval.py"),
        [
            f"data.root={SPIDER}",
            f"run_dir={tmp_path / 'run'}",
            f"inference.predictions_file={_gold_file(tmp_path, n=5)}",
        ],
    )
    with pytest.raises(ValueError, match="one SQL per line"):
        run_pipeline(cfg, log=lambda *_: None)
