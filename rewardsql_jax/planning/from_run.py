"""Planning the RL stage of a pipeline ``RunConfig`` (what ``launch/run.py ... plan=true`` calls)."""

from __future__ import annotations

import re
from pathlib import Path

from rewardsql_jax.models.adapters import adapted_config
from rewardsql_jax.models.config import ModelConfig
from rewardsql_jax.models.fresh import fresh_config
from rewardsql_jax.models.gguf import find_gguf_file
from rewardsql_jax.models.presets import PRESETS, preset_config
from rewardsql_jax.models.pretrained import pretrained_config
from rewardsql_jax.rl import get_algorithm, policy_loss
from rewardsql_jax.rl.rollouts import sampler_prompts

from .aot import plan_memory
from .result import Plan


def model_config_of(run_config) -> ModelConfig:
    """The policy architecture of a run as its train stages build it: ``base_model_config_of`` with the run's LoRA
    adapters (``model.lora``; the train state then holds the adapters as its parameters and the base frozen)."""
    cfg = base_model_config_of(run_config)
    lora = run_config.model.lora
    return adapted_config(cfg, lora) if lora.enabled else cfg


def base_model_config_of(run_config) -> ModelConfig:
    """The policy architecture of a run's checkpoints (no adapters): the checkpoint's config.json; a known preset
    matched by the checkpoint folder name when the folder is not on this machine; else the fresh Qwen2 of
    ``config.model``."""
    m = run_config.model
    if m.path:
        if (Path(m.path) / "config.json").exists() or (Path(m.path).exists() and find_gguf_file(m.path)):
            return pretrained_config(m.path, dtype=m.dtype, max_position_embeddings=max(m.max_len, 1))
        name = Path(m.path).name.lower()
        for preset in PRESETS:
            if re.match(re.escape(preset) + r"(\b|-|$)", name):
                return preset_config(preset, dtype=m.dtype)
        raise FileNotFoundError(
            f"model.path={m.path} has no config.json here and matches no preset {list(PRESETS)}; "
            f"copy its config.json to this machine to plan it"
        )
    return fresh_config(m, m.vocab_size)


def plan_from_run_config(
    run_config, *, devices=None, hbm_gb: float | None = None, compile_layers: int | None = None
) -> Plan:
    """Plan the online RL step of ``run_config``: ``rl.prompts_per_step`` x ``rl.samples_per_prompt`` rows of
    ``model.max_len`` tokens (``max_len - rl.max_new_tokens`` of prompt), ``mesh.micro_batches``, the sampler
    called on the RL stage's prompt chunks. ``devices``: a count (when a mesh axis is -1) or devices."""
    rl, mesh = run_config.rl, run_config.mesh
    loss, options = policy_loss(rl)
    if not get_algorithm(rl.algorithm).online:
        raise ValueError(
            f"the RL plan compiles the online step (samples + policy-gradient update); rl.algorithm={rl.algorithm!r} "
            f"is offline (loss {loss!r}): launch/run.py's memory check compiles its train step instead"
        )
    cfg = model_config_of(run_config)
    prompt_len = run_config.model.max_len - rl.max_new_tokens
    if prompt_len < 1:
        raise ValueError(
            f"model.max_len={run_config.model.max_len} leaves no room for prompts with "
            f"rl.max_new_tokens={rl.max_new_tokens}"
        )
    return plan_memory(
        cfg,
        mesh_shape=(mesh.data, mesh.fsdp, mesh.tensor),
        devices=devices,
        prompts=rl.prompts_per_step,
        samples=rl.samples_per_prompt,
        prompt_len=prompt_len,
        response_len=rl.max_new_tokens,
        loss=loss,
        loss_options=options,
        micro_batches=mesh.micro_batches,
        compute_dtype=run_config.model.dtype,
        sample_prompts=sampler_prompts(rl),
        hbm_gb=hbm_gb,
        compile_layers=compile_layers,
        name=Path(run_config.model.path).name or None,
        shared_prefix=rl.shared_prefix,
    )
