"""Every model a stage holds is in its memory row: the RL row grows by the PRM scorer's weights exactly when the
algorithm's reward uses the PRM, inference holds the policy and the PRM, PRM labelling the SFT policy and its
sampler; a stage that does not fit stops the run with one message naming it, its bytes and the fix."""

import dataclasses

import jax
import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.planning import memory_check, stage_memory
from rewardsql_jax.planning.from_run import model_config_of
from rewardsql_jax.planning.sampling_memory import host_sampling_mesh, loaded_config, sampler_cache_bytes, weight_bytes
from rewardsql_jax.stages import runner
from rewardsql_jax.stages.run_config import DataConfig, PRMConfig, RLConfig, RunConfig, SFTConfig

TINY = RunConfig(
    name="stagemem",
    workers=1,
    data=DataConfig(n_train_dbs=1, n_test_dbs=1, questions_per_db=4),
    model=tiny_model(vocab_size=256, max_len=256),
    sft=SFTConfig(steps=2, batch_size=2),
    prm=PRMConfig(steps=2, batch_size=2),
    rl=RLConfig(algorithm="grpo", steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=64),
)


def _rows(cfg, stages):
    return {r.stage: r for r in stage_memory.stage_rows(cfg, stages, jax.devices()[:1], 1)}


def _scorer_bytes(cfg):
    return weight_bytes(loaded_config(model_config_of(cfg), cfg.model.dtype), host_sampling_mesh(1, jax.devices()[:1]))


def test_the_rl_row_holds_the_prm_scorer_only_when_the_algorithm_uses_it(tmp_path):
    cfg = dataclasses.replace(TINY, run_dir=str(tmp_path))
    with_prm = _rows(cfg, ("rl",))["rl"]
    outcome = _rows(dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, algorithm="grpo_outcome")), ("rl",))["rl"]
    scorer = _scorer_bytes(cfg)
    assert scorer > 0
    assert "PRM scorer (local)" in with_prm.models and "PRM scorer (local)" not in outcome.models
    assert {"policy", "reference", "AdamW moments", "sampler KV cache"} <= set(outcome.models)
    assert with_prm.peak_bytes >= outcome.peak_bytes + scorer
    assert any(p.name == "PRM scorer weights" and p.bytes == scorer for p in with_prm.parts)
    assert not any("PRM" in p.name for p in outcome.parts)


def test_inference_holds_policy_prm_and_the_best_of_n_cache(tmp_path):
    cfg = dataclasses.replace(TINY, run_dir=str(tmp_path))
    row = _rows(cfg, ("inference",))["inference"]
    w = _scorer_bytes(cfg)
    mesh = host_sampling_mesh(1, jax.devices()[:1])
    inf = cfg.inference
    cache = sampler_cache_bytes(
        loaded_config(model_config_of(cfg), cfg.model.dtype),
        mesh,
        prompts=8,
        samples=inf.best_of_n,
        prompt_len=cfg.model.max_len - cfg.rl.max_new_tokens,
        new_tokens=inf.max_new_tokens,
    )
    assert row.models == ("policy", "PRM scorer", "sampler KV cache")
    assert row.peak_bytes > 2 * w + cache
    no_prm = _rows(dataclasses.replace(cfg, stages=("cold_start", "sft", "inference")), ("inference",))["inference"]
    assert "PRM scorer" not in no_prm.models and no_prm.peak_bytes <= row.peak_bytes - w
    bigger = dataclasses.replace(cfg, inference=dataclasses.replace(inf, best_of_n=32 * inf.best_of_n))
    grown = _rows(bigger, ("inference",))["inference"]
    assert grown.phase == "sampler" and grown.peak_bytes > row.peak_bytes


def test_prm_labels_holds_the_sft_policy_and_its_sampler(tmp_path):
    row = _rows(dataclasses.replace(TINY, run_dir=str(tmp_path)), ("prm_labels",))["prm_labels"]
    assert row.models == ("SFT policy", "sampler KV cache")
    assert [p.name.split(" (")[0] for p in row.parts] == ["SFT policy weights", "KV cache", "prefill activations"]


def test_a_sampling_stage_that_does_not_fit_names_the_stage_bytes_and_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "stage_function", lambda name: lambda ctx: {})
    cfg = dataclasses.replace(TINY, run_dir=str(tmp_path / "run"), memory_limit_gb=1e-4, stages=("inference",))
    (tmp_path / "run" / "prm" / "model").mkdir(parents=True)  # a PRM trained by an earlier run
    (tmp_path / "run" / "prm" / "model" / "config.json").write_text("{}")
    with pytest.raises(memory_check.WillNotFit) as err:
        runner.run_pipeline(cfg, log=lambda *_: None)
    msg = str(err.value)
    assert msg.startswith("will OOM: the ") and " of the inference stage needs" in msg
    assert "GB per device" in msg and "inference.best_of_n" in msg and "PRM scorer weights" in msg
    assert "memory_check=off" in msg


def test_with_lora_the_state_holds_base_and_adapters_and_trains_the_adapters_alone(tmp_path):
    from rewardsql_jax.models.lora import LoRAConfig
    from rewardsql_jax.planning.train_memory import train_state_bytes

    cfg = dataclasses.replace(TINY, run_dir=str(tmp_path))
    lora = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=LoRAConfig(rank=2)))
    devices = jax.devices()[:1]
    (full_policy, _, full_opt), (policy, ref, opt) = (
        train_state_bytes(cfg, devices),
        train_state_bytes(lora, devices),
    )
    adapters = policy - full_policy  # the policy is the whole base plus its adapters
    assert 0 < adapters < full_policy / 4
    assert ref == adapters  # the reference is the initial adapters over the same base, not a second base
    assert 2 * adapters <= opt < 2 * adapters + 64 < full_opt  # AdamW moments of the adapters (and step counts)
    # the RL row: the PRM is its adapters over the policy's base in one process, the whole model across hosts
    row = _rows(lora, ("rl",))["rl"]
    prm = [p for p in row.parts if "PRM" in p.name and "activations" not in p.name]
    assert [(p.name, p.bytes) for p in prm] == [("PRM adapters over the policy's base", adapters)]
    assert "PRM adapters (over the policy's base)" in row.models
    assert row.peak_bytes < _rows(cfg, ("rl",))["rl"].peak_bytes
    assert not stage_memory._Counter(lora, 2, 1).prm_over_policy_base
    # adapters alone train: no base gradients or moments in the compiled SFT step
    assert _rows(lora, ("sft",))["sft"].peak_bytes < _rows(cfg, ("sft",))["sft"].peak_bytes


def test_a_bf16_lora_base_is_counted_at_half_the_bytes(tmp_path):
    from rewardsql_jax.models.lora import LoRAConfig
    from rewardsql_jax.planning.train_memory import train_state_bytes

    def policy_bytes(lora):
        cfg = dataclasses.replace(TINY, run_dir=str(tmp_path), model=dataclasses.replace(TINY.model, lora=lora))
        return train_state_bytes(cfg, jax.devices()[:1])

    full, _, _ = policy_bytes(LoRAConfig())
    fp32, ref, opt = policy_bytes(LoRAConfig(rank=2))
    bf16, ref16, opt16 = policy_bytes(LoRAConfig(rank=2, base_dtype="bfloat16"))
    adapters = fp32 - full
    assert bf16 == full // 2 + adapters  # the base at 2 bytes per weight, the adapters still fp32
    assert (ref16, opt16) == (ref, opt)  # reference and moments are the adapters', unchanged


def test_extrapolation_goes_through_the_two_deepest_compiled_depths():
    from rewardsql_jax.planning.aot import extrapolate_layers
    from rewardsql_jax.planning.result import CompiledStats

    def stats(temp):
        return CompiledStats("s", 10, 5, 5, temp, 0, 2.0 * temp, 1.0)

    # 1 -> 2 layers grows 1, then 5 a layer: k = 3 extrapolates with the settled growth, k = 2 would not
    deep = extrapolate_layers(stats(101), stats(106), 3, 10)
    assert deep.temp_bytes == 106 + 7 * 5 and deep.flops == 2.0 * (106 + 7 * 5)
    assert deep.argument_bytes == 10 and deep.compile_seconds == 2.0
    assert extrapolate_layers(stats(100), stats(101), 2, 10).temp_bytes == 101 + 8 * 1


@pytest.mark.parametrize("stage", ["sft", "prm"])
def test_a_train_step_compiled_at_two_depths_extrapolates_to_the_full_depths_weights(stage):
    from rewardsql_jax.planning.train_memory import train_step_memory

    cfg = dataclasses.replace(TINY, model=dataclasses.replace(TINY.model, num_layers=4))
    full = train_step_memory(cfg, stage, jax.devices()[:1]).stats
    est = train_step_memory(cfg, stage, jax.devices()[:1], compile_layers=3).stats  # compiles 2 and 3 layers
    # the state's bytes (weights, AdamW moments) are exactly linear in the depth: extrapolated, they must land on them
    assert est.argument_bytes == full.argument_bytes
    assert est.flops == pytest.approx(full.flops, rel=0.02)


def test_compile_layers_below_two_is_refused_with_the_fix():
    from rewardsql_jax.planning.train_memory import train_step_memory

    with pytest.raises(ValueError, match="must be >= 2"):
        train_step_memory(TINY, "sft", jax.devices()[:1], compile_layers=1)
