"""A real kill: ``launch/run.py`` on the smoke config is SIGKILLed once the RL stage has a finished Orbax
checkpoint; rerunning the same command skips the finished stages, resumes RL from that checkpoint and finishes
with the evaluate metrics written."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two launches of the smoke pipeline: ~2-3 min on 2 CPU cores

ROOT = Path(__file__).resolve().parents[2]


def _finished_checkpoint(run_dir: Path) -> int | None:
    """The newest RL checkpoint Orbax has finished (a step-named folder; in-progress saves have a tmp suffix)
    whose meta file is written too (``training/step_checkpoints.py``), or None."""
    ckpt, meta = run_dir / "rl" / "checkpoint", run_dir / "rl" / "checkpoint_meta"
    steps = [int(p.name) for p in ckpt.glob("*") if p.name.isdigit() and (meta / f"{p.name}.json").exists()]
    return max(steps, default=None)


def test_a_killed_run_resumes_rl_from_its_checkpoint_and_finishes(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
        "rl.steps=6",
        "rl.checkpoint_every=1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "first.log", "w") as out:
        first = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 240
            while _finished_checkpoint(run_dir) is None and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert first.poll() is None, (
                "the run ended before the RL stage checkpointed:\n" + (tmp_path / "first.log").read_text()[-3000:]
            )
            assert _finished_checkpoint(run_dir) is not None, "no RL checkpoint within 240 s"
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)  # the launcher, its SQL workers, everything in its group
            first.wait()
    assert first.returncode == -signal.SIGKILL
    assert not (run_dir / "rl" / "metrics.json").exists() and not (run_dir / "evaluate").exists()

    second = subprocess.run(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    log = second.stdout
    assert second.returncode == 0, log[-3000:]
    for stage in ("cold_start", "sft", "prm_labels", "prm"):
        assert f"[{stage}] already done in {run_dir} (resume): skipping" in log
    resumed = re.search(r"\[rl\] resumed from step (\d+)/6", log)
    assert resumed and int(resumed.group(1)) > 0, log[-3000:]
    rl = json.loads((run_dir / "rl" / "metrics.json").read_text())
    assert rl["resumed_from_step"] == int(resumed.group(1)) and rl["steps"] == 6
    assert [s for s, _ in rl["reward_curve"]] == list(range(6))
    assert (run_dir / "evaluate" / "metrics.json").exists()
