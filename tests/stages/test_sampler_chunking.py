"""``rl.prompts_per_sampler_call``: validated against ``rl.prompts_per_step`` and handed to every sampler call of
the RL stage (online and offline) and to the AOT plan; 0 keeps the automatic chunking."""

import types

import pytest

from rewardsql_jax.planning import from_run
from rewardsql_jax.rl.rollouts import chunk_prompts, sampler_prompts
from rewardsql_jax.stages import rl
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.rl import offline as rl_offline
from rewardsql_jax.stages.rl import online as rl_online
from rewardsql_jax.stages.rl import setup as rl_setup
from rewardsql_jax.stages.run_config import RLConfig, RunConfig


class Sampled(Exception):
    """Raised by the stub sampler once it has seen its arguments."""


def test_validation_and_the_automatic_default():
    assert sampler_prompts(RLConfig(prompts_per_step=8)) == chunk_prompts(8) == 4
    assert sampler_prompts(RLConfig(prompts_per_step=8, prompts_per_sampler_call=8)) == 8
    assert sampler_prompts(RLConfig(prompts_per_step=6, prompts_per_sampler_call=3)) == 3
    for bad in (3, -1):
        with pytest.raises(ValueError, match="rl.prompts_per_sampler_call.*must divide rl.prompts_per_step=8"):
            RLConfig(prompts_per_step=8, prompts_per_sampler_call=bad)


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    """A run context whose RL data, state, tokenizer and pool are stand-ins, and whose sampler records
    ``prompts_per_call`` and stops the stage."""
    seen = []

    def sampler(*args, prompts_per_call, **kw):
        seen.append(prompts_per_call)
        raise Sampled

    data = rl_setup.RLData([{"prompt": "q"}] * 8, [[1, 2]] * 8, 64, 0)
    state = types.SimpleNamespace(model=lambda: None)
    monkeypatch.setattr(rl_offline, "sample_rollouts", sampler)
    monkeypatch.setattr(rl_online, "RolloutSampler", sampler)  # the online loop's sampler, built once per run
    for module in (rl_online, rl_offline):
        monkeypatch.setattr(module, "rl_data", lambda ctx: data)
        monkeypatch.setattr(module, "new_state", lambda ctx: state)
        monkeypatch.setattr(module, "train_step", lambda *a, **k: None)
    monkeypatch.setattr(rl_offline, "load_prm_scorer", lambda ctx: None)

    def make(algorithm, per_call):
        cfg = RunConfig(
            run_dir=str(tmp_path / algorithm),
            stages=("rl",),
            rl=RLConfig(algorithm=algorithm, prompts_per_step=8, prompts_per_sampler_call=per_call),
        )
        c = RunContext.create(cfg)
        c._tokenizer, c._pool = types.SimpleNamespace(pad_token_id=0, eos_token_id=0), object()
        return c

    return make, seen


@pytest.mark.parametrize("algorithm", ["grpo_outcome", "dpo"])
def test_the_rl_stage_samples_in_calls_of_the_configured_size(ctx, algorithm):
    make, seen = ctx
    for per_call in (2, 0):
        with pytest.raises(Sampled):
            rl.run_rl(make(algorithm, per_call))
    assert seen == [2, chunk_prompts(8)]


def test_the_plan_compiles_the_sampler_for_the_configured_size(monkeypatch):
    seen = {}
    monkeypatch.setattr(from_run, "plan_memory", lambda cfg, **kw: seen.update(kw))
    from_run.plan_from_run_config(RunConfig(rl=RLConfig(prompts_per_step=8, prompts_per_sampler_call=8)))
    assert seen["sample_prompts"] == 8 and seen["prompts"] == 8
