"""Filling an abstract model from a checkpoint one tensor at a time (the safetensors and GGUF loaders share it).

The model is built abstractly (``nnx.eval_shape``): no parameter is allocated until its tensor is read, and each is
placed in its sharding before the next is read, so a host holds at most one tensor (or one shard of it) beyond
the placed model.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, Sharding

from .architecture import KeyMap
from .config import ModelConfig
from .registry import build_model
from .sharding import DEFAULT_RULES, AxisRules, variable_sharding
from .transformer import CausalLM

# read(row, target_shape, target_dtype, sharding or None) -> the parameter as a (sharded) jax array
TensorReader = Callable[[KeyMap, tuple, np.dtype, "Sharding | None"], jax.Array]


def place(host: np.ndarray, sharding: Sharding | None) -> jax.Array:
    """Put a host array on the devices: whole, or each device's shard of it cut from ``host``."""
    if sharding is None:
        return jax.device_put(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def load_parameters(
    cfg: ModelConfig,
    table: tuple[KeyMap, ...],
    read: TensorReader,
    *,
    mesh: Mesh | None,
    rules: AxisRules = DEFAULT_RULES,
    desc: str = "loading",
) -> CausalLM:
    """``cfg``'s model with every parameter read by ``read`` (rows of ``table``), placed on ``mesh`` by ``rules``."""
    from tqdm.auto import tqdm

    abstract = nnx.eval_shape(lambda: build_model(cfg))
    graphdef, state = nnx.split(abstract)
    flat = dict(nnx.to_flat_state(state))
    rows_by_path = {row.path: row for row in table}
    if set(rows_by_path) != set(flat):  # a bug in a architecture's tables, not user input
        raise RuntimeError(f"key table and model parameters disagree: {set(rows_by_path) ^ set(flat)}")
    loaded = []
    for p, var in tqdm(flat.items(), desc=desc, unit="tensor", leave=False, disable=None):
        aval = var.get_value()
        sharding = variable_sharding(var, mesh, rules) if mesh is not None else None
        loaded.append((p, var.replace(read(rows_by_path[p], tuple(aval.shape), aval.dtype, sharding))))
    return nnx.merge(graphdef, nnx.from_flat_state(loaded))
