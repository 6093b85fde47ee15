"""Start ``launch/run.py`` the way a pod does, on this machine: N cooperating processes (gloo collectives, a
coordinator on a free localhost port), each with its own simulated CPU devices."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = str(ROOT / "launch" / "run.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, *, processes: int, devices: int, log_dir: Path, script: str = RUN) -> list[subprocess.Popen]:
    """``python launch/run.py args...`` (args: its options and overrides; or another ``script``) as ``processes``
    processes of ``devices`` CPU devices; output in ``log_dir/process<i>.log``."""
    port, procs = free_port(), []
    log_dir.mkdir(parents=True, exist_ok=True)
    for i in range(processes):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        if processes > 1:
            env.update(
                JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
                JAX_NUM_PROCESSES=str(processes),
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                JAX_PROCESS_ID=str(i),
            )
        with open(log_dir / f"process{i}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, script, *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
                )
            )
    return procs


def wait(procs, log_dir: Path, *, timeout: float = 600) -> tuple[list[int], list[str]]:
    """Return codes and outputs; every process still running after ``timeout`` (or after another failed) is
    killed, so a test never leaves processes behind."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], [(log_dir / f"process{i}.log").read_text() for i in range(len(procs))]


def launch(args, *, processes: int, devices: int, log_dir: Path, timeout: float = 600, script: str = RUN) -> list[str]:
    """Run to the end; assert every process exited 0; their outputs."""
    procs = start(args, processes=processes, devices=devices, log_dir=log_dir, script=script)
    codes, outs = wait(procs, log_dir, timeout=timeout)
    for i, (code, out) in enumerate(zip(codes, outs)):
        assert code == 0, f"process {i} exited with {code}:\n{out[-4000:]}"
    return outs


def wait_for_rl_step(run_dir: Path, step: int, procs, *, timeout: float = 300) -> None:
    """Block until the run's log has RL step ``step`` (or a process died, or the time ran out)."""
    deadline = time.monotonic() + timeout
    log = Path(run_dir) / "log.jsonl"
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                r = json.loads(line)
                if r.get("stage") == "rl" and r.get("step", -1) >= step and "loss" in r:
                    return
        if any(p.poll() is not None for p in procs):
            raise AssertionError("a process ended before the RL step was reached")
        time.sleep(0.2)
    raise AssertionError(f"RL step {step} not reached in {timeout} s")


def model_params(path: Path) -> list:
    """The parameters of the HF model directory ``path`` as numpy arrays (to compare two runs)."""
    import jax
    import numpy as np
    from flax import nnx

    from rewardsql_jax.models import from_pretrained

    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(from_pretrained(path), nnx.Param))]
