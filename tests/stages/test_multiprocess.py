"""The pod launch, on this machine: ``launch/run.py`` as 2 processes x 2 CPU devices (gloo collectives, one
coordinator on localhost), the way a TPU slice or a multi-node GPU job runs it, against 1 process x 8 devices:
the same final parameters (fp32 tolerance) and the same EX table; one process writes the shared files; the
sampling stages' models are sharded over every device of their process."""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from rewardsql_jax.conductor.context import STAGES

from pod import launch, model_params, start

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# configs/smoke.py's 2 RL prompts per step on 4 devices: the shared-prefix RL batch runs padded with masked rows
# (training.padding). RL on the outcome reward: with the PRM in the reward, groups whose samples tie up to the
# PRM's fp32 noise (the two runs' PRMs differ by ~2e-7) get z-scored advantages of that noise (std << the 1e-6
# epsilon), so grpo's parameters agree only to ~1e-3.
SMOKE = [
    "--config",
    str(ROOT / "configs" / "smoke.py"),
    "workers=1",
    "rl.algorithm=grpo_outcome",
    "prm_labels.num_questions=16",  # two chunks of questions to label: one per process
]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    pod, single = tmp_path_factory.mktemp("pod"), tmp_path_factory.mktemp("single")
    cache = ["--compilation-cache", str(pod / "xla")]
    outs = launch([*SMOKE, *cache, f"run_dir={pod / 'run'}"], processes=2, devices=2, log_dir=pod)
    launch([*SMOKE, f"run_dir={single / 'run'}"], processes=1, devices=8, log_dir=single)
    return pod / "run", single / "run", outs


@pytest.mark.parametrize("model", ["sft/policy", "prm/model", "rl/policy"])
def test_two_processes_train_the_same_parameters_as_one(two_runs, model):
    pod, single, _ = two_runs
    for a, b in zip(model_params(pod / model), model_params(single / model)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_two_processes_give_the_same_ex_table_and_write_each_file_once(two_runs):
    pod, single, outs = two_runs
    assert not any((pod.parent / "xla").iterdir())  # no compilation cache across processes (compilation_cache.py)
    ex = [json.loads((run / "evaluate" / "metrics.json").read_text())["ex"] for run in (pod, single)]
    assert ex[0] == ex[1]
    records = [json.loads(line) for line in (pod / "log.jsonl").read_text().splitlines()]
    rl_steps = [r["step"] for r in records if r.get("stage") == "rl" and "or_rate" in r]
    assert rl_steps == list(range(json.loads((pod / "config.json").read_text())["rl"]["steps"]))  # not twice
    assert sum(r.get("stage") == "sft" and "finished_at" in r for r in records) == 1
    for i, out in enumerate(outs):  # every process says who it is; both ran every stage to the end
        assert f"[process {i}/2] [rl] done" in out and f"[process {i}/2] [evaluate] done" in out
    assert "SFT greedy" in outs[0] and "SFT greedy" not in outs[1]  # the summary is printed once


def test_sampling_and_scoring_models_are_sharded_over_every_device_of_their_process(two_runs):
    """The labelling policy, inference's policies and PRM, and the RL stage's PRM scorer: on 8 devices in one
    process and on 2 devices in each pod process, every weight matrix is split (none whole on a device)."""
    pod, single, _ = two_runs
    for run, devices in ((single, 8), (pod, 2)):
        placed = {"labelling policy": _metrics(run, "prm_labels")["policy_placement"]}
        placed.update({f"inference {k}": v for k, v in _metrics(run, "inference")["placement"].items()})
        assert set(placed) == {"labelling policy", "inference sft", "inference rl", "inference prm"}
        assert all(p == {"devices": devices, "whole_matrices": 0} for p in placed.values()), (run, placed)


def _metrics(run, stage):
    return json.loads((run / stage / "metrics.json").read_text())


def test_sqlconductor_runs_with_two_processes_as_with_one(tmp_path):
    """The SQLConductor pipeline (configs/conductor_smoke.py) under the same pod launch: the same policies and
    the same evaluation table as one process; the primary alone writes run_dir."""
    conductor = ["--config", str(ROOT / "configs" / "conductor_smoke.py")]
    outs = launch([*conductor, f"run_dir={tmp_path / 'pod'}"], processes=2, devices=2, log_dir=tmp_path / "pod_logs")
    launch([*conductor, f"run_dir={tmp_path / 'one'}"], processes=1, devices=4, log_dir=tmp_path / "one_logs")
    res = [json.loads((tmp_path / run / "results.json").read_text()) for run in ("pod", "one")]
    assert res[0]["evaluations"] == res[1]["evaluations"]
    for a, b in zip(model_params(tmp_path / "pod" / "policy_sft_rl"), model_params(tmp_path / "one" / "policy_sft_rl")):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert "SFT+RL policy" in outs[0] and "SFT+RL policy" not in outs[1]


def test_sampling_stages_split_the_questions_and_equal_one_process(two_runs, tmp_path):
    """PRM labelling and inference on the pod: each process answered its chunks of questions with the models
    sharded over its own two devices, and the primary merged the shares. The labels and predictions are exactly
    what one process with two devices computes from the same SFT policy, PRM and RL policy."""
    pod, _, _ = two_runs
    again = tmp_path / "again"
    shutil.copytree(pod, again, ignore=shutil.ignore_patterns("prm_labels", "inference", "evaluate"))
    launch([*SMOKE, f"run_dir={again}", "stages=prm_labels,inference"], processes=1, devices=2, log_dir=tmp_path)
    for name in ("prm_labels/labels.jsonl", "inference/predictions.json"):
        assert (pod / name).read_text() == (again / name).read_text(), name
    for stage in ("prm_labels", "inference"):
        assert not list((pod / stage).glob("*.part*.json"))  # the shares are cleaned up
    labels = json.loads((pod / "prm_labels" / "metrics.json").read_text())
    assert labels["questions_per_process"] == [8, 8] and min(labels["db_calls_per_process"]) > 0
    assert labels["policy_placement"] == {"devices": 2, "whole_matrices": 0}
    inference = json.loads((pod / "inference" / "metrics.json").read_text())
    assert inference["processes"] == 2 and inference["questions_per_process"] == [8, 4]
    assert inference["sql_executed_per_process"] == [8 * 2 * 2, 4 * 2 * 2]  # N=2 samples of SFT and RL policies
    assert set(inference["placement"]) == {"sft", "rl", "prm"}
    assert all(p == {"devices": 2, "whole_matrices": 0} for p in inference["placement"].values())


def test_rl_scores_each_rollout_on_one_process_and_equals_one_process(two_runs, tmp_path):
    """RL on the pod: each process decoded, executed and scored its own rows (the counts), and the gathered rewards
    of every step are those of one process on the same four devices, from the same SFT policy."""
    pod, _, _ = two_runs
    again = tmp_path / "again"
    shutil.copytree(pod, again, ignore=shutil.ignore_patterns("rl", "inference", "evaluate"))
    launch([*SMOKE, f"run_dir={again}", "stages=rl"], processes=1, devices=4, log_dir=tmp_path)

    def steps(run):
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        return [
            (r["step"], r["reward"], r["or_rate"], r["executable_rate"])
            for r in log
            if r.get("stage") == "rl" and "or_rate" in r
        ]

    assert len(steps(pod)) == 2 and len(steps(again)) == 4  # the copied log's 2 steps, then the rerun's
    assert steps(pod) == steps(again)[2:]
    rows = json.loads((pod / "rl" / "metrics.json").read_text())["rows_scored_per_process"]
    assert rows == [4, 4]  # 2 steps x 2 prompts x 2 samples, half on each process
    assert json.loads((again / "rl" / "metrics.json").read_text())["rows_scored_per_process"] == [8]


def test_sqlconductor_killed_on_two_processes_resumes_on_both(tmp_path):
    """A 2-process SQLConductor run SIGKILLed once its search stage has finished, rerun with 2 processes: both
    exit 0, and the primary and the other process (which restored run_dir's finished stages into its scratch
    directory, conductor/run.py) skip the same finished stages."""
    run = tmp_path / "run"
    args = ["--config", str(ROOT / "configs" / "conductor_smoke.py"), f"run_dir={run}"]
    procs = start(args, processes=2, devices=1, log_dir=tmp_path / "killed")
    try:
        deadline = time.monotonic() + 300
        while not (run / "search" / "metrics.json").exists():
            assert all(p.poll() is None for p in procs), "a process ended before the search stage finished"
            assert time.monotonic() < deadline, "the search stage did not finish in 300 s"
            time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
    assert not (run / "results.json").exists()
    done = {p.parent.name for p in run.glob("*/metrics.json")}
    assert {"action_model", "search"} <= done and "evaluation" not in done

    outs = launch(args, processes=2, devices=1, log_dir=tmp_path / "rerun")
    skip = re.compile(r"\[conductor\] (\w+) already done in (\S+) \(resume\): skipping")
    skipped = [{m.group(1): m.group(2) for m in skip.finditer(out)} for out in outs]
    assert set(skipped[0]) == set(skipped[1]) == done
    assert set(skipped[0].values()) == {str(run)} and str(run) not in skipped[1].values()  # its scratch copy
    assert f"[conductor] process 1: restored {', '.join(s for s in STAGES if s in done)}" in outs[1]
    results = json.loads((run / "results.json").read_text())
    assert set(results["evaluations"]) == {"fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy"}
    assert "SFT+RL policy" in outs[0] and "SFT+RL policy" not in outs[1]
