"""``plugins=FILE``: the loss + algorithm file of docs/plugins.md (linked from the README), saved as a user would,
trains in the RL stage through ``launch/run.py`` with nothing but command-line overrides (and the package untouched)."""

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


def docs_plugin(marker: str = "plugin-example") -> str:
    text = (ROOT / "docs" / "plugins.md").read_text()
    return re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", text, re.S).group(1)


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
def test_docs_plugin_trains_its_algorithm_and_its_loss(tmp_path):
    plugin = tmp_path / "elsewhere" / "my_plugin.py"
    plugin.parent.mkdir()
    plugin.write_text(docs_plugin())
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


def test_docs_plugin_with_its_own_normalisation_has_the_sequence_mean_gradient(tmp_path, monkeypatch):
    """The ``my_seq_pg`` plugin file, loaded as ``plugins=`` loads it: its loss through the train step (2 micro-batches, rows of unequal length and one empty row) has the
    gradient of its docstring's formula, (1/B) sum_b sum_t -A_b log pi_bt m_bt / max(sum_t m_bt, 1), by jax.grad."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from rewardsql_jax.losses import registry
    from rewardsql_jax.models import ModelConfig, build_model
    from rewardsql_jax.training import (
        OptimizerConfig,
        RLBatch,
        create_train_state,
        loss_and_grads,
        make_optimizer,
        sequence_logprobs,
    )

    monkeypatch.setattr(registry, "_LOSSES", dict(registry._LOSSES))
    plugin = tmp_path / "my_seq_pg.py"
    plugin.write_text(docs_plugin("plugin-example-normalisation"))
    load_plugins([plugin])
    cfg = ModelConfig(
        model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, attention_bias=True,
    )  # fmt: skip
    state = create_train_state(build_model(cfg, seed=0), make_optimizer(OptimizerConfig()), seed=0)
    rng = np.random.default_rng(0)
    b, t = 4, 10
    ids = rng.integers(0, 64, (b, t)).astype(np.int32)
    mask = np.zeros((b, t), np.float32)
    for row, n in enumerate((6, 2, 0, 4)):  # completion lengths: the sequence mean differs from the token mean
        mask[row, t - n :] = 1.0
    adv = rng.normal(size=b).astype(np.float32)
    batch = RLBatch(ids, np.ones((b, t), np.int32), mask, old_logprobs=None, advantages=adv)

    def formula(params):
        lp = sequence_logprobs(nnx.merge(state.graphdef, params), ids, batch.attention_mask)
        rows = jnp.sum(-adv[:, None] * lp * mask, axis=-1) / jnp.maximum(mask.sum(-1), 1.0)
        return jnp.mean(rows)

    want_loss, want = jax.value_and_grad(formula)(state.params)
    loss, grads, metrics = loss_and_grads(
        state.params, None, state.graphdef, batch, loss_name="my_seq_pg", micro_batches=2
    )
    assert float(metrics["loss_denominator"]) == b
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    for got, ref in zip(jax.tree.leaves(grads), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=2e-5, atol=2e-7)


@pytest.mark.slow
def test_docs_plugin_with_its_own_normalisation_trains_through_launch(tmp_path):
    plugin = tmp_path / "my_seq_pg.py"
    plugin.write_text(docs_plugin("plugin-example-normalisation"))
    done = _launch(tmp_path, f"plugins={plugin}", "rl.loss=my_seq_pg")
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "smoke"
    metrics = json.loads((run / "rl" / "metrics.json").read_text())
    assert metrics["loss_name"] == "my_seq_pg"
    records = _rl_records(run)
    assert len(records) == 2 and all("my_seq_pg/tokens_per_row" in r["loss_metrics"] for r in records)


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
