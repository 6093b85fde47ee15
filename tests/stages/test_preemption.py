"""Preemption with a real signal: SIGTERM to a running ``launch/run.py`` during RL checkpoints at the next step
boundary and exits resumably (143); the same command then finishes with parameters bit-identical to a run that
was never interrupted. Single process, and 2 processes where only one of them is signalled; full fine-tuning and
LoRA (the checkpoint then holds the adapters and their optimizer state alone)."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from pod import launch, model_params, start, wait, wait_for_rl_step

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_BASE = ["--config", str(ROOT / "configs" / "smoke.py"), "workers=1"]
RL = ["stages=cold_start,sft,rl", "rl.algorithm=grpo_outcome", "rl.steps=20", "rl.checkpoint_every=100"]
LORA = ["model.lora.rank=4", "model.lora.targets=q,v,gate"]


def _preempt_and_resume(tmp_path: Path, *, processes: int, devices: int, signalled: int, extra=()):
    base = tmp_path / "base"
    BASE = [*_BASE, *extra]
    launch(
        [*BASE, f"run_dir={base}", "stages=cold_start,sft"],
        processes=processes,
        devices=devices,
        log_dir=tmp_path / "logs_base",
    )
    full, cut = tmp_path / "full", tmp_path / "cut"
    shutil.copytree(base, full)
    shutil.copytree(base, cut)
    launch([*BASE, f"run_dir={full}", *RL], processes=processes, devices=devices, log_dir=tmp_path / "logs_full")
    procs = start([*BASE, f"run_dir={cut}", *RL], processes=processes, devices=devices, log_dir=tmp_path / "logs_cut")
    wait_for_rl_step(cut, 1, procs)
    procs[signalled].send_signal(signal.SIGTERM)
    codes, outs = wait(procs, tmp_path / "logs_cut")
    assert codes == [143] * processes, outs
    assert all("preempted (SIGTERM)" in o and "resumable" in o for o in outs)
    assert not (cut / "rl" / "metrics.json").exists()
    metas = [int(p.stem) for p in (cut / "rl" / "checkpoint_meta").glob("*.json")]
    assert metas and max(metas) < 20  # stopped early, at a step boundary after the signal
    launch([*BASE, f"run_dir={cut}", *RL], processes=processes, devices=devices, log_dir=tmp_path / "logs_resume")
    m = json.loads((cut / "rl" / "metrics.json").read_text())
    assert 2 <= m["resumed_from_step"] < 20 and m["steps"] == 20
    for a, b in zip(model_params(cut / "rl" / "policy"), model_params(full / "rl" / "policy")):
        np.testing.assert_array_equal(a, b)
    if extra:  # the RL checkpoint held the adapters alone, and the resumed adapters are the uninterrupted ones
        saved = list((cut / "rl" / "checkpoint").glob("*/state/_METADATA"))
        assert saved
        for path in saved:  # every matrix Orbax wrote (params, reference, AdamW moments) is an adapter's
            tree = json.loads(path.read_text())["tree_metadata"]
            matrices = [k for k, v in tree.items() if len(v["value_metadata"].get("write_shape") or ()) >= 2]
            assert matrices and all("'lora'" in k for k in matrices), path
        for a, b in zip(_adapters(cut), _adapters(full), strict=True):
            np.testing.assert_array_equal(a, b)


def _adapters(run_dir: Path) -> list:
    from safetensors.numpy import load_file

    stored = load_file(str(run_dir / "rl" / "policy" / "adapter" / "adapter_model.safetensors"))
    return [stored[k] for k in sorted(stored)]


def test_sigterm_during_rl_resumes_to_the_uninterrupted_result(tmp_path):
    _preempt_and_resume(tmp_path, processes=1, devices=1, signalled=0)


def test_sigterm_to_one_process_of_two_stops_both_at_the_same_step(tmp_path):
    _preempt_and_resume(tmp_path, processes=2, devices=1, signalled=1)


def test_sigterm_during_lora_rl_resumes_to_the_uninterrupted_result(tmp_path):
    _preempt_and_resume(tmp_path, processes=1, devices=1, signalled=0, extra=LORA)


def test_sigterm_to_one_of_two_lora_processes_stops_both_and_resumes(tmp_path):
    _preempt_and_resume(tmp_path, processes=2, devices=1, signalled=1, extra=LORA)
