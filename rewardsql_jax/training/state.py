"""Train state as one pytree: static graph + optimizer, params, optax state, step, RNG, frozen reference params."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from rewardsql_jax.models.adapters import has_adapters
from rewardsql_jax.models.lora import LoRAParam

if TYPE_CHECKING:
    from rewardsql_jax.models.transformer import CausalLM


@struct.dataclass
class TrainState:
    """Everything a train step reads and returns; donated to the jitted step.

    ``graphdef`` (the NNX module structure) and ``tx`` (the optax transformation) are static. ``params`` holds
    the fp32 master weights the step trains (an ``nnx.State`` of ``nnx.Param`` keeping its ``logical_axes``
    metadata). A model with LoRA adapters (``models.lora``) trains them alone: ``params`` are the adapters and
    ``frozen`` the base weights, which the step passes through unchanged (no gradient, no optimizer state);
    otherwise ``frozen`` is None. ``ref_params`` are the frozen reference policy's weights (KL / DPO; the adapters
    of one when the policy has them), or None; the step reads them only through ``jax.lax.stop_gradient`` and
    never updates them.
    """

    if TYPE_CHECKING:  # added by flax.struct.dataclass

        def replace(self, **updates: Any) -> TrainState: ...

    graphdef: Any = struct.field(pytree_node=False)
    tx: optax.GradientTransformation = struct.field(pytree_node=False)
    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array
    rng: jax.Array
    ref_params: nnx.State | None = None
    frozen: nnx.State | None = None

    def model(self) -> CausalLM:
        """The policy as a live NNX module (a fresh copy; editing it does not change the state)."""
        return merge_model(self.graphdef, self.params, self.frozen)

    def ref_model(self) -> nnx.Module | None:
        """The frozen reference model, or None when the state holds no reference."""
        if self.ref_params is None:
            return None
        return merge_model(self.graphdef, jax.lax.stop_gradient(self.ref_params), self.frozen)


def merge_model(graphdef, params, frozen=None):
    """The model of a graphdef, its trained ``params`` and (LoRA) its ``frozen`` base weights.

    The frozen weights enter as new variables of the current trace (``nnx.merge`` would reuse the state's, and a
    model merged inside ``jax.grad`` or ``scan`` that held the outer trace's could not run ``nnx.remat``)."""
    if frozen is None:
        return nnx.merge(graphdef, params)
    return nnx.merge(graphdef, params, jax.tree.map(lambda x: x, frozen))


def create_train_state(
    model: nnx.Module,
    tx: optax.GradientTransformation,
    *,
    seed: int = 0,
    with_reference: bool = False,
    ref_model: nnx.Module | None = None,
) -> TrainState:
    """Split ``model`` into graph + params and initialise the optimizer state.

    ``with_reference=True`` keeps a copy of the initial weights as the frozen reference (the usual GRPO / DPO
    reference); ``ref_model`` supplies a different one (same architecture). A model with LoRA adapters trains
    them alone (``TrainState.frozen``: the base), and its reference is a set of adapters over the same base.
    """
    if has_adapters(model):
        trained: type[nnx.Param] = LoRAParam
        graphdef, params, *rest = nnx.split(model, LoRAParam, nnx.Param, ...)
        frozen = rest.pop(0)
    else:
        trained, frozen = nnx.Param, None
        graphdef, params, *rest = nnx.split(model, nnx.Param, ...)
    if jax.tree.leaves(rest):
        raise ValueError("the model holds non-Param state (e.g. batch stats); TrainState supports only nnx.Param.")
    ref_params = None
    if ref_model is not None:
        ref_params = nnx.state(ref_model, trained)
        if jax.tree.structure(ref_params) != jax.tree.structure(params):  # type: ignore[operator]  # jaxlib: PyTreeDef has no stub
            raise ValueError("ref_model must have the same architecture (parameter tree) as model.")
    elif with_reference:
        ref_params = jax.tree.map(jnp.copy, params)
    return TrainState(
        graphdef=graphdef,
        tx=tx,
        params=params,
        opt_state=tx.init(params),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.key_data(jax.random.key(seed)),
        ref_params=ref_params,
        frozen=frozen,
    )
