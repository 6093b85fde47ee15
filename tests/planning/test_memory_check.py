"""The AOT memory check the pipeline runs before its first training stage: a step that cannot fit the device
memory stops the run with the planner's message before any stage writes anything; a fitting one passes;
``memory_check=off`` skips it; on CPU ``auto`` skips it (logged) unless ``memory_limit_gb`` is set."""

import dataclasses
import importlib.util
import types
from pathlib import Path

import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.planning import memory_check
from rewardsql_jax.stages import runner
from rewardsql_jax.stages.run_config import DataConfig, PRMConfig, RLConfig, RunConfig, SFTConfig

ROOT = Path(__file__).resolve().parents[2]
TINY = RunConfig(
    name="memcheck",
    workers=1,
    data=DataConfig(n_train_dbs=1, n_test_dbs=1, questions_per_db=4),
    model=tiny_model(vocab_size=256, max_len=256),
    sft=SFTConfig(steps=2, batch_size=2),
    prm=PRMConfig(steps=2, batch_size=2),
    rl=RLConfig(algorithm="grpo_outcome", steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=64),
)


def _cfg(tmp_path, **kw):
    return dataclasses.replace(TINY, run_dir=str(tmp_path / "run"), **kw)


@pytest.fixture
def ran(monkeypatch):
    """Stage functions replaced by recorders: the tests exercise the check, not the stages."""
    calls = []
    monkeypatch.setattr(runner, "stage_function", lambda name: lambda ctx: calls.append(name) or {})
    return calls


def test_a_step_that_cannot_fit_stops_the_run_before_any_stage_writes(tmp_path):
    cfg = _cfg(tmp_path, memory_limit_gb=1e-4)  # 100 KB per device: the SFT step needs more
    with pytest.raises(MemoryError) as err:
        runner.run_pipeline(cfg, log=lambda *_: None)
    msg = str(err.value)
    assert "will OOM: the sft train step" in msg and "sft.batch_size" in msg and "mesh.micro_batches" in msg
    assert "memory_check=off" in msg and "memory_limit_gb=0.0001" in msg
    run = tmp_path / "run"
    assert not (run / "cold_start").exists() and not (run / "sft").exists()


def test_the_launcher_prints_the_message_and_exits_1(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("launch_run", ROOT / "launch" / "run.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    argv = ["--config", str(ROOT / "configs" / "smoke.py"), f"run_dir={tmp_path / 'run'}", "memory_limit_gb=0.0001"]
    assert launcher.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: will OOM: the sft train step") and "memory_check=off" in err


def test_a_fitting_run_is_checked_and_runs(tmp_path, ran):
    lines = []
    runner.run_pipeline(_cfg(tmp_path, memory_limit_gb=100.0, stages=("cold_start", "sft", "rl")), log=lines.append)
    assert ran == ["cold_start", "sft", "rl"]
    checked = [line for line in lines if line.startswith("[memory_check]")]
    assert [line.split()[1] for line in checked] == ["sft:", "rl:"]
    assert all("fits: peak" in line and "memory_limit_gb=100" in line for line in checked)


def test_the_grpo_rl_plan_reports_its_oom(tmp_path, ran):
    with pytest.raises(
        MemoryError, match=r"will OOM: the (train step|sampler|PRM scoring) of the rl stage needs .*memory_check=off"
    ):
        runner.run_pipeline(_cfg(tmp_path, memory_limit_gb=1e-4, stages=("rl",)), log=lambda *_: None)
    assert ran == []


@pytest.mark.parametrize("stage,algorithm", [("prm", "grpo"), ("rl", "dpo"), ("rl", "rs")])
def test_every_training_step_can_be_planned(tmp_path, stage, algorithm):
    cfg = _cfg(tmp_path, rl=dataclasses.replace(TINY.rl, algorithm=algorithm))
    import jax

    fit = memory_check.check_stage(cfg, stage, jax.devices(), int(100e9))
    assert fit.ok and 0 < fit.peak_bytes < 100e9 and f"{stage} train step" in fit.message


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp"])
def test_every_online_algorithm_gets_the_whole_rl_plan(tmp_path, algorithm):
    """The RL plan (train step and sampler) covers every online algorithm, whatever batch field its loss reads
    (reinforce_pp's token rewards too: it was planned by its train step alone while the planner took only grpo)."""
    cfg = _cfg(tmp_path, rl=dataclasses.replace(TINY.rl, algorithm=algorithm))
    import jax

    assert memory_check.planned_by_the_rl_plan(cfg)
    fit = memory_check.check_stage(cfg, "rl", jax.devices(), int(100e9))
    assert fit.ok and 0 < fit.peak_bytes < 100e9 and fit.message.startswith("fits: peak")


def test_off_skips_the_check(tmp_path, ran):
    lines = []
    runner.run_pipeline(_cfg(tmp_path, memory_check="off", memory_limit_gb=1e-4, stages=("sft",)), log=lines.append)
    assert ran == ["sft"] and not any("memory_check" in line for line in lines)


def test_auto_on_cpu_skips_with_a_reason_and_finished_stages_are_not_checked(tmp_path, ran):
    lines = []
    runner.run_pipeline(_cfg(tmp_path, stages=("sft",)), log=lines.append)
    assert any(line.startswith("[memory_check] skipped on CPU") and "memory_check=on" in line for line in lines)
    cfg = _cfg(tmp_path, memory_limit_gb=1e-4, stages=("cold_start", "sft"))
    (tmp_path / "run" / "sft").mkdir(parents=True)
    (tmp_path / "run" / "sft" / "metrics.json").write_text("{}")
    runner.run_pipeline(cfg, log=lambda *_: None)  # sft is done, cold_start trains nothing: no check, no error


def test_accelerator_limit_comes_from_memory_stats(monkeypatch):
    gpu = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H200", memory_stats=lambda: {"bytes_limit": 7e9})
    monkeypatch.setattr("jax.local_devices", lambda: [gpu])
    assert memory_check.memory_limit(TINY, [gpu]) == (7_000_000_000, "NVIDIA H200 memory_stats bytes_limit")

    def broken():
        raise RuntimeError("no stats")

    bare = types.SimpleNamespace(platform="tpu", device_kind="TPU v5", memory_stats=broken)
    monkeypatch.setattr("jax.local_devices", lambda: [bare])
    limit, why = memory_check.memory_limit(TINY, [bare])
    assert limit is None and "memory_limit_gb" in why
    assert memory_check.memory_limit(dataclasses.replace(TINY, memory_limit_gb=2.5), [bare])[0] == 2_500_000_000


def test_on_uses_host_ram_on_cpu_and_bad_modes_fail():
    import jax

    limit, why = memory_check.memory_limit(dataclasses.replace(TINY, memory_check="on"), jax.devices())
    assert limit and limit > 0 and "host RAM" in why
    with pytest.raises(ValueError, match="memory_check"):
        RunConfig(memory_check="strict")
