"""Shardings of a whole TrainState and of batches, from the models' one logical-axis rules table."""

from __future__ import annotations

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rewardsql_jax.models.sharding import activation_sharding, variable_sharding

from .state import TrainState


def _is_var(x) -> bool:
    return isinstance(x, nnx.Variable)


def state_shardings(state: TrainState, mesh: Mesh) -> TrainState:
    """TrainState-shaped tree of NamedShardings: params, their Adam moments and the reference follow the
    parameters' ``logical_axes``; scalars (step, RNG, optimizer counts) are replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())

    def one(x):
        if _is_var(x) and "logical_axes" in x.get_metadata():
            return x.replace(variable_sharding(x, mesh))
        if _is_var(x):
            return x.replace(replicated)
        return replicated

    return jax.tree.map(one, state, is_leaf=_is_var)


def shard_state(state: TrainState, mesh: Mesh) -> TrainState:
    """Place every array of ``state`` on ``mesh`` (FSDP / tensor parallel per the rules table)."""
    return jax.device_put(state, state_shardings(state, mesh))


def batch_shardings(batch, mesh: Mesh):
    """Batch-shaped tree of shardings: dimension 0 over ("data", "fsdp"), the rest replicated."""
    sharding = activation_sharding(("batch",), mesh)
    return jax.tree.map(lambda _: sharding, batch)


def micro_batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of a micro-batched leaf ``[M, B/M, ...]``: micro index replicated, rows over data x fsdp."""
    return activation_sharding((None, "batch"), mesh)
