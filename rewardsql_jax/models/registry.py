"""Model architectures by name: ``model_type`` (HF ``config.json``) or GGUF ``general.architecture`` -> ``Architecture``,
and the few functions that need the architecture of a config (build, HF config parse / emit, checkpoint key tables)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flax import nnx

from .architecture import Architecture, KeyMap
from .config import ModelConfig
from .llama import LLAMA
from .qwen2 import QWEN2

ARCHITECTURES: dict[str, Architecture] = {f.model_type: f for f in (QWEN2, LLAMA)}
GGUF_ARCHITECTURES: dict[str, Architecture] = {f.gguf_architecture: f for f in ARCHITECTURES.values()}
MODEL_CLASSES = {name: f.model_class for name, f in ARCHITECTURES.items()}


def architecture_of(model_type: str) -> Architecture:
    """The architecture of an HF ``model_type`` (a clear error naming the supported ones otherwise)."""
    if model_type not in ARCHITECTURES:
        raise ValueError(f"unsupported model_type {model_type!r}; rewardsql_jax supports {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[model_type]


def architecture_of_gguf(architecture: str, path) -> Architecture:
    """The architecture of a GGUF file's ``general.architecture``."""
    if architecture not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF file {path} has architecture {architecture!r}; rewardsql_jax loads {sorted(GGUF_ARCHITECTURES)} "
            "(a new architecture is one architecture file in rewardsql_jax/models/, see docs/models.md)"
        )
    return GGUF_ARCHITECTURES[architecture]


def build_model(cfg: ModelConfig, *, seed: int = 0):
    """Randomly initialised model of ``cfg``'s architecture (weights ~ N(0, 0.02), norms 1, biases 0)."""
    return architecture_of(cfg.model_type).model_class(cfg, rngs=nnx.Rngs(params=seed))


def config_from_hf(d: Mapping[str, Any], **overrides) -> ModelConfig:
    """A ``ModelConfig`` from the fields of a HF ``config.json`` (its architecture parses them)."""
    model_type = d.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"unsupported model_type {model_type!r} in config.json; rewardsql_jax supports {sorted(ARCHITECTURES)}"
        )
    return ModelConfig(**(ARCHITECTURES[model_type].parse_hf(d) | overrides))


def config_from_json(path, **overrides) -> ModelConfig:
    """``config_from_hf`` of ``path/config.json`` (or of ``path`` when it is the file)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"no config.json at {path}; pass a HF model directory that contains config.json")
    return config_from_hf(json.loads(path.read_text()), **overrides)


def config_to_hf(cfg: ModelConfig) -> dict:
    """The ``config.json`` fields transformers needs to rebuild ``cfg``'s architecture."""
    return architecture_of(cfg.model_type).emit_hf(cfg)


def hf_key_table(cfg: ModelConfig) -> tuple[KeyMap, ...]:
    """Every parameter of ``cfg``'s model as HF checkpoint keys (:class:`KeyMap` rows, checkpoint order)."""
    return architecture_of(cfg.model_type).hf_keys(cfg)
