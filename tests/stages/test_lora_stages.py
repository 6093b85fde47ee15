"""`model.lora.rank > 0` through the pipeline: every train stage trains adapters alone over the model it loads,
saves merged weights beside its adapters (peft format), and resumes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
RANK = 4


def _weights(path: Path) -> dict:
    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_lora_trains_adapters_alone_in_every_train_stage(tmp_path):
    run_dir = tmp_path / "lora"
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
        f"model.lora.rank={RANK}",
        "model.lora.targets=q,v,gate",
        "stages=cold_start,sft,prm_labels,prm,rl",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for d in ("sft/policy", "prm/model", "rl/policy"):
        config = json.loads((run_dir / d / "adapter" / "adapter_config.json").read_text())
        assert config["r"] == RANK and set(config["target_modules"]) == {"q_proj", "v_proj", "gate_proj"}, d
        assert (run_dir / d / "adapter" / "adapter_model.safetensors").exists(), d
    sft, rl, prm = (_weights(run_dir / d) for d in ("sft/policy", "rl/policy", "prm/model"))
    assert set(rl) == set(sft) == set(prm)
    for later in (rl, prm):  # both start from the SFT policy's merged weights
        changed = []
        for name, w in sft.items():
            delta = later[name].astype(np.float64) - w.astype(np.float64)
            if any(t in name for t in ("q_proj.weight", "v_proj.weight", "gate_proj.weight")):
                # the trained adapters moved a targeted projection by B A alpha / r: rank <= r
                assert np.linalg.matrix_rank(delta, tol=1e-6 * max(np.abs(w).max(), 1.0)) <= RANK, name
                changed.append(np.abs(delta).max() > 0)
            else:  # the frozen base: bit-identical
                np.testing.assert_array_equal(later[name], w, err_msg=name)
        assert any(changed)
    # Rerunning the same command resumes: every stage is skipped.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("already done") == 5
