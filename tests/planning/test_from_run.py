"""The model architecture a RunConfig plans (no compilation)."""

import dataclasses
import json

import pytest

from rewardsql_jax.models import config_to_hf
from rewardsql_jax.planning import model_config_of, preset_config
from rewardsql_jax.stages.run_config import ModelConfigSection, RunConfig


def test_missing_checkpoint_matches_preset_by_folder_name():
    cfg = RunConfig(model=ModelConfigSection(path="/nowhere/Qwen2.5-Coder-7B-Instruct", dtype="bfloat16"))
    m = model_config_of(cfg)
    assert (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads) == (3584, 28, 28, 4)
    assert (m.intermediate_size, m.vocab_size, m.tie_word_embeddings, m.dtype) == (18944, 152064, False, "bfloat16")
    assert model_config_of(
        dataclasses.replace(cfg, model=ModelConfigSection(path="/x/Qwen2.5-Coder-32B"))
    ) == preset_config("qwen2.5-coder-32b", dtype="float32")


def test_checkpoint_config_json_wins(tmp_path):
    d = config_to_hf(preset_config("qwen2.5-coder-7b").replace(num_hidden_layers=3))
    (tmp_path / "config.json").write_text(json.dumps(d))
    m = model_config_of(RunConfig(model=ModelConfigSection(path=str(tmp_path))))
    assert m.num_hidden_layers == 3 and m.hidden_size == 3584


def test_fresh_model_and_unknown_path():
    m = model_config_of(RunConfig())
    assert (m.hidden_size, m.num_hidden_layers, m.vocab_size) == (128, 2, 2048)
    with pytest.raises(FileNotFoundError, match="config.json"):
        model_config_of(RunConfig(model=ModelConfigSection(path="/nowhere/some-model")))


def test_the_rl_plan_asks_the_loss_for_its_batch_field():
    """REINFORCE++ trains on token rewards, not advantages: the plan compiles its step with that field (a plan
    that tested the loss's name refused it), and names the families it cannot plan."""
    from rewardsql_jax.planning import plan_from_run_config, plan_memory
    from rewardsql_jax.stages.run_config import MeshConfig, RLConfig

    cfg = RunConfig(
        model=ModelConfigSection(max_len=64),
        mesh=MeshConfig(data=1, fsdp=1, tensor=1),
        rl=RLConfig(algorithm="reinforce_pp", prompts_per_step=2, samples_per_prompt=2, max_new_tokens=16),
    )
    plan = plan_from_run_config(cfg, devices=1)
    assert plan.loss == "reinforce_pp" and plan.train.temp_bytes > 0
    with pytest.raises(ValueError, match="offline"):
        plan_from_run_config(dataclasses.replace(cfg, rl=RLConfig(algorithm="dpo")), devices=1)
    with pytest.raises(ValueError, match="supervised loss.*grpo"):
        plan_memory(model_config_of(cfg), loss="sft", devices=1)
