"""The persistent compilation cache: launch/run.py keeps compiled programs on disk, a second run reads them back
(nothing compiled anew, the same numbers), '' turns it off, and a directory that cannot be made is one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

from rewardsql_jax.compilation_cache import MIN_COMPILE_ENV

ROOT = Path(__file__).resolve().parents[1]


def _launch(*args, timeout=600, env=None):
    cmd = [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(ROOT / "configs" / "smoke.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _programs(cache: Path) -> set[str]:
    return {p.name for p in cache.glob("*-cache")}


def test_a_second_run_reads_every_program_back_and_trains_the_same(tmp_path):
    cache = tmp_path / "xla"
    written = {}
    # every program kept, however fast it compiled: which ones pass the 0.2 s default depends on the machine's load
    every_program = {**os.environ, MIN_COMPILE_ENV: "0"}
    for run in ("first", "second"):
        args = ("--compilation-cache", str(cache), f"run_dir={tmp_path / run}", "stages=cold_start,sft")
        proc = _launch(*args, env=every_program)
        assert proc.returncode == 0, proc.stderr[-4000:]
        written[run] = _programs(cache)
    assert len(written["first"]) >= 2  # the SFT step and more were kept
    assert written["second"] == written["first"]  # the second run compiled nothing the first had not
    losses = [json.loads((tmp_path / run / "sft" / "metrics.json").read_text())["loss_curve"] for run in written]
    assert losses[0] == losses[1]


def test_an_empty_directory_name_turns_it_off(tmp_path):
    code = (
        "import jax; from rewardsql_jax.compilation_cache import cache_directory as c, use_compilation_cache as u; "
        "print(u(c('')), jax.config.values['jax_compilation_cache_dir'])"
    )
    env_free = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_free, check=True)
    assert out.stdout.split() == ["None", "None"]


def test_a_directory_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = _launch("--compilation-cache", str(blocker / "xla"), f"run_dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2
    assert "cannot create the compilation cache directory" in proc.stderr
    assert "Traceback" not in proc.stderr
