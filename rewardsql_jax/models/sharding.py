"""Device mesh and the one table of logical-axis -> mesh-axis rules.

Mesh axes: ``data`` (pure data parallel), ``fsdp`` (data parallel with parameters sharded along
``embed``), ``tensor`` (Megatron-style: heads, MLP width and vocabulary split). Parameters carry
``logical_axes`` metadata (see ``transformer.py``); activations and caches use the ``act_*`` /
``cache_*`` names below. Nothing else in the package hard-codes a PartitionSpec.

Divisibility: when a mesh axis does not divide the dimension it would shard (e.g. 2 KV heads over
tensor=4, or vocab 151 over fsdp=2), that mesh axis is dropped for that dimension (replicated
instead) rather than failing or padding. A mesh axis is also used at most once per array.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import numpy as np
from flax import nnx
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

if TYPE_CHECKING:
    from jax.sharding import AbstractMesh

MESH_AXES = ("data", "fsdp", "tensor")


@dataclasses.dataclass(frozen=True)
class AxisRules:
    """Ordered ``(logical_axis, mesh_axes)`` pairs; ``mesh_axes`` is None, one name, or a tuple of names."""

    rules: tuple

    def lookup(self, logical: str | None):
        """Mesh axes for one logical axis (None = replicated); unknown names are an error."""
        if logical is None:
            return None
        for name, mesh_axes in self.rules:
            if name == logical:
                return mesh_axes
        raise KeyError(
            f"logical axis {logical!r} has no sharding rule; add it to AxisRules (known: {[r[0] for r in self.rules]})"
        )


DEFAULT_RULES = AxisRules(
    rules=(
        # parameters
        ("vocab", "tensor"),
        ("embed", "fsdp"),
        ("q_heads", "tensor"),
        ("kv_heads", "tensor"),
        ("mlp", "tensor"),
        ("norm", None),
        ("lora_rank", None),  # LoRA adapters' rank axis (models.lora); their other axis follows the base kernel's
        # activations
        ("batch", ("data", "fsdp")),
        ("seq", None),
        ("act_embed", None),
        ("act_heads", "tensor"),
        ("act_kv_heads", "tensor"),
        ("act_mlp", "tensor"),
        ("act_vocab", "tensor"),
        ("head_dim", None),
        # KV cache [B, S, Hkv, D]
        ("cache_batch", ("data", "fsdp")),
        ("cache_seq", None),
        ("cache_kv_heads", "tensor"),
    )
)


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices=None) -> Mesh:
    """Mesh with axes ``("data", "fsdp", "tensor")``; one size may be -1 to take all remaining devices."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got data={data}, fsdp={fsdp}, tensor={tensor}")
    known = math.prod(s for s in sizes if s != -1)
    if any(s == 0 or s < -1 for s in sizes) or len(devices) % known:
        raise ValueError(f"mesh data={data} x fsdp={fsdp} x tensor={tensor} does not fit {len(devices)} devices")
    sizes = [len(devices) // known if s == -1 else s for s in sizes]
    if math.prod(sizes) != len(devices):
        raise ValueError(
            f"mesh data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} = {math.prod(sizes)} devices, "
            f"but {len(devices)} are available; make the product equal the device count (or use -1 for one axis)"
        )
    return Mesh(np.asarray(devices).reshape(sizes), MESH_AXES)


def logical_to_spec(
    logical_axes, rules: AxisRules = DEFAULT_RULES, *, shape=None, mesh: Mesh | AbstractMesh | None = None
) -> PartitionSpec:
    """PartitionSpec for an array with the given logical axes.

    With ``shape`` and ``mesh``, mesh axes whose size does not divide the dimension (or that an
    earlier dimension already uses) are dropped, so that dimension falls back to replication.
    """
    used: set[str] = set()
    spec = []
    for dim, logical in enumerate(logical_axes):
        mesh_axes = rules.lookup(logical)
        names = () if mesh_axes is None else ((mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes))
        kept, factor = [], 1
        for name in names:
            if name in used:
                continue
            if shape is not None and mesh is not None:
                size = mesh.shape[name]
                if shape[dim] % (factor * size):
                    continue
                factor *= size
            kept.append(name)
        used.update(kept)
        spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def variable_sharding(var: nnx.Variable, mesh: Mesh, rules: AxisRules = DEFAULT_RULES) -> NamedSharding:
    """NamedSharding of one (possibly abstract) variable from its ``logical_axes`` metadata."""
    axes = var.get_metadata().get("logical_axes")
    shape = var.get_value().shape
    if axes is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, logical_to_spec(axes, rules, shape=shape, mesh=mesh))


def param_shardings(model_or_state, mesh: Mesh, rules: AxisRules = DEFAULT_RULES):
    """Pytree of NamedShardings matching ``nnx.state(model)`` (or the given state), for jit in/out shardings.

    Works on a real model or on ``nnx.eval_shape(...)`` output; each Variable's value is replaced by
    its NamedSharding (the convention of ``nnx.get_named_sharding``).
    """
    state = model_or_state if isinstance(model_or_state, nnx.State) else nnx.state(model_or_state)
    return jax.tree.map(
        lambda v: v.replace(variable_sharding(v, mesh, rules)),
        state,
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )


def shard_model(model: nnx.Module, mesh: Mesh, rules: AxisRules = DEFAULT_RULES) -> nnx.Module:
    """Move every variable of ``model`` to its NamedSharding (in place); returns the model."""
    state = nnx.state(model)
    shardings = param_shardings(state, mesh, rules)
    nnx.update(model, jax.device_put(state, shardings))
    return model


def model_mesh(model_or_state) -> Mesh | AbstractMesh | None:
    """The mesh a model's (or state's) parameters are sharded over, or None (an unsharded / single-device model)."""
    state = model_or_state if isinstance(model_or_state, nnx.State) else nnx.state(model_or_state)
    sharding = getattr(jax.tree.leaves(state)[0], "sharding", None)
    return sharding.mesh if isinstance(sharding, NamedSharding) else None


def placement(model) -> dict:
    """Where a model's weights live: ``devices`` (how many hold a part of them) and ``whole_matrices`` (weight
    matrices, 2-D or more, that some device holds whole: 0 when they are all split, as the training rules split
    them over an fsdp axis > 1; vectors such as norm scales and biases are replicated by those rules)."""
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    devices = set().union(*(x.sharding.device_set for x in leaves))
    whole = sum(x.ndim >= 2 and len(devices) > 1 and x.addressable_shards[0].data.shape == x.shape for x in leaves)
    return {"devices": len(devices), "whole_matrices": int(whole)}


def batch_sharding(mesh: Mesh, rules: AxisRules = DEFAULT_RULES, *, shape=None) -> NamedSharding:
    """NamedSharding for ``[B, T]`` token / mask arrays (batch over data x fsdp, sequence replicated)."""
    return NamedSharding(mesh, logical_to_spec(("batch", "seq"), rules, shape=shape, mesh=mesh if shape else None))


def activation_sharding(
    logical_axes, mesh: Mesh | AbstractMesh, rules: AxisRules = DEFAULT_RULES, *, shape=None
) -> NamedSharding:
    """NamedSharding for any activation / cache array named by logical axes (e.g. ``("batch", "seq", "act_vocab")``)."""
    return NamedSharding(mesh, logical_to_spec(logical_axes, rules, shape=shape, mesh=mesh if shape else None))


def constrain(x, logical_axes, mesh: Mesh | AbstractMesh | None, rules: AxisRules = DEFAULT_RULES):
    """Inside ``jit``: ``x`` laid out by its logical axes on ``mesh`` (``with_sharding_constraint``; mesh axes that do
    not divide a dimension are dropped for it). Without a mesh, ``x`` unchanged."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, activation_sharding(logical_axes, mesh, rules, shape=x.shape))
