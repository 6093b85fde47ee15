"""``plugins=FILE``: the README's loss + algorithm file, saved as a user would, trains in the RL stage through
``launch/run.py`` with nothing but command-line overrides (and the package untouched)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rewardsql_jax.plugins import load_plugins, plugin_overrides

ROOT = Path(__file__).resolve().parents[1]


def readme_plugin() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"<!-- plugin-example -->\n```python\n(.*?)```", text, re.S).group(1)


def _launch(cwd: Path, *overrides):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(ROOT / "configs" / "smoke.py"), *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _rl_records(run: Path) -> list[dict]:
    lines = (run / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("stage") == "rl" and "loss_metrics" in r]


@pytest.mark.slow
def test_readme_plugin_trains_its_algorithm_and_its_loss(tmp_path):
    plugin = tmp_path / "elsewhere" / "my_plugin.py"
    plugin.parent.mkdir()
    plugin.write_text(readme_plugin())
    first = tmp_path / "first"
    first.mkdir()
    done = _launch(first, f"plugins={plugin}", "rl.algorithm=mean_baseline")
    assert done.returncode == 0, done.stderr[-3000:]
    run = first / "runs" / "smoke"
    metrics = json.loads((run / "rl" / "metrics.json").read_text())
    assert metrics["algorithm"] == "mean_baseline" and metrics["loss_name"] == "my_pg"
    records = _rl_records(run)
    assert len(records) == 2  # configs/smoke.py: rl.steps=2
    for rec in records:  # the metric only my_pg returns: this loss was trained, on mean-baseline advantages
        assert "my_pg/adv_abs_mean" in rec["loss_metrics"] and "clip_ratio/region" not in rec["loss_metrics"]
        assert set(rec["phase_seconds"]) == {"generate", "execute", "reward", "advantage", "update"}
    assert (run / "rl" / "policy" / "config.json").exists()

    # the same file, only rl.loss on the command line: the default algorithm (grpo, PRM + outcome) trains my_pg
    second = tmp_path / "second"
    shutil.copytree(first / "runs", second / "runs")
    for stage in ("rl", "inference", "evaluate"):
        shutil.rmtree(second / "runs" / "smoke" / stage)
    done = _launch(second, f"plugins={plugin}", "rl.loss=my_pg")
    assert done.returncode == 0, done.stderr[-3000:]
    run = second / "runs" / "smoke"
    metrics = json.loads((run / "rl" / "metrics.json").read_text())
    assert metrics["algorithm"] == "grpo" and metrics["loss_name"] == "my_pg"
    assert all("my_pg/adv_abs_mean" in r["loss_metrics"] for r in _rl_records(run))


def test_bad_plugin_and_unknown_names_are_one_line_errors(tmp_path):
    done = _launch(tmp_path, f"plugins={tmp_path / 'missing.py'}")
    assert done.returncode == 2 and "no Python file" in done.stderr and "Traceback" not in done.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    done = _launch(tmp_path, f"plugins={broken}")
    assert done.returncode == 2 and "importing" in done.stderr and "boom" in done.stderr
    done = _launch(tmp_path, "rl.algorithm=mean_baseline")  # without the plugin it is unknown
    assert done.returncode == 2 and "unknown rl.algorithm 'mean_baseline'" in done.stderr
    assert "Traceback" not in done.stderr


def test_load_plugins_imports_once_and_parses_overrides(tmp_path):
    f = tmp_path / "count.py"
    f.write_text("import builtins\nbuiltins._plugin_loads = getattr(builtins, '_plugin_loads', 0) + 1\n")
    import builtins

    (m1,), (m2,) = load_plugins([f]), load_plugins([str(f)])
    assert m1 is m2 and builtins._plugin_loads == 1
    assert plugin_overrides(["sft.steps=3", "plugins=a.py,b.py", "rl.loss=x"]) == ["a.py", "b.py"]
    assert plugin_overrides(["plugins=('a.py', 'b.py')"]) == ["a.py", "b.py"]
