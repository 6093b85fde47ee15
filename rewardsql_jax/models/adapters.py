"""A model's LoRA adapters as a whole (``models.lora``): add them to a model, take them off, merge them into the base
weights, read them as one state, and switch their dropout on inside a train step.

Every function returns a new model that shares the base weights with the one it was given (the same variables:
nothing is copied but what changes), placed as that model is: sharded models stay sharded by the parameters'
logical axes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from .config import ModelConfig
from .lora import ADAPTER_DTYPE, LoRA, LoRAConfig, LoRADropoutKey, LoRAParam
from .registry import build_model
from .sharding import model_mesh, param_shardings
from .transformer import CausalLM


def has_adapters(model: nnx.Module) -> bool:
    """Whether ``model`` carries LoRA adapters."""
    return bool(jax.tree.leaves(nnx.state(model, LoRAParam)))


def adapter_state(model: nnx.Module) -> nnx.State:
    """The adapters alone (``nnx.state(model, LoRAParam)``): what a LoRA run trains and checkpoints."""
    return nnx.state(model, LoRAParam)


def base_state(model: nnx.Module) -> nnx.State:
    """Every variable but the adapters: the frozen base weights."""
    return nnx.state(model, nnx.Not(LoRAParam))


def adapted_config(cfg: ModelConfig, lora: LoRAConfig) -> ModelConfig:
    """The architecture of a model ``cfg`` once ``lora``'s adapters are added: the adapters, and the base stored in
    ``lora.base_dtype`` when one is given (the planner builds the same model abstractly)."""
    return cfg.replace(lora=lora, param_dtype=lora.base_dtype or cfg.param_dtype)


def _cast_base(state: nnx.State, dtype) -> nnx.State:
    """Base weights in ``dtype`` (each array keeps its sharding: an elementwise cast)."""
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, state)


def add_adapters(model: CausalLM, lora: LoRAConfig, *, seed: int = 0) -> CausalLM:
    """``model`` with fresh LoRA adapters (Hu et al. 2021, Eq. 3: h = W0 x + B A x, scaled by alpha / r) on the
    projections ``lora`` targets: A kaiming-uniform, B zeros, so the logits are those of the base as stored.

    The adapters are those ``build_model`` draws for ``seed`` (only they are computed: the base weights come from
    ``model``, cast to ``lora.base_dtype`` when one is given, e.g. bf16 for half the base's memory; the adapters are
    fp32). A model that has adapters already, or a ``lora`` of rank 0, is refused.
    """
    if has_adapters(model):
        raise ValueError("the model already has LoRA adapters; take them off first (without_adapters / merge_adapters)")
    if not lora.enabled:
        raise ValueError(f"lora.rank={lora.rank}: give a rank > 0 to add adapters")
    cfg = adapted_config(model.config, lora)
    abstract = nnx.eval_shape(lambda: build_model(cfg, seed=seed))
    mesh = model_mesh(model)
    placed = {"out_shardings": param_shardings(nnx.state(abstract, LoRAParam), mesh)} if isinstance(mesh, Mesh) else {}
    adapters = jax.jit(lambda: nnx.state(build_model(cfg, seed=seed), LoRAParam), **placed)()
    base = base_state(model)
    if cfg.param_dtype != model.config.param_dtype:
        base = _cast_base(base, cfg.weight_dtype)
    return nnx.merge(nnx.graphdef(abstract), base, adapters)


def without_adapters(model: CausalLM) -> CausalLM:
    """The base model of a LoRA model (its adapters off), sharing the base weights: e.g. the frozen reference
    policy of a LoRA run, or several adapter sets over one base."""
    if not has_adapters(model):
        return model
    plain = nnx.eval_shape(lambda: build_model(model.config.replace(lora=LoRAConfig())))
    return nnx.merge(nnx.graphdef(plain), base_state(model))


def _merged_kernel(kernel, a, b, scale: float, dtype):
    w = kernel.astype(jnp.float32) + scale * jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
    return w.astype(dtype)


def merge_adapters(model: CausalLM) -> CausalLM:
    """The plain model whose projections hold ``W + A B * alpha / r`` (computed in fp32): the same function as the
    LoRA model, without adapters (what ``save_pretrained`` writes for HF tools). It is stored in the wider of the
    base's and the adapters' dtypes, so a bf16 base (``LoRAConfig.base_dtype``) gives an fp32 model: rounding
    ``W + A B`` to bf16 would lose most of the small update."""
    if not has_adapters(model):
        return model
    dtype = jnp.promote_types(model.config.weight_dtype, ADAPTER_DTYPE)
    merged = without_adapters(model)
    if dtype != model.config.weight_dtype:
        name = jnp.dtype(dtype).name
        plain = nnx.eval_shape(lambda: build_model(merged.config.replace(param_dtype=name)))
        merged = nnx.merge(nnx.graphdef(plain), _cast_base(nnx.state(merged), dtype))
    lookup = dict(nnx.iter_graph(model))
    for path, node in nnx.iter_graph(merged):
        lora = getattr(lookup.get(path), "lora", None)
        if isinstance(lora, LoRA):
            kernel = node.kernel[...]
            placed = {"out_shardings": kernel.sharding} if model_mesh(model) is not None else {}
            merge = jax.jit(_merged_kernel, static_argnums=(3, 4), **placed)
            node.kernel = nnx.Param(
                merge(kernel, lora.a[...], lora.b[...], lora.scale, dtype), **node.kernel.get_metadata()
            )
    return merged


def dropout_on(model: nnx.Module, key) -> None:
    """Give every adapter with dropout > 0 its own key (folded from ``key``), in place: the train step's model
    drops adapter inputs (as peft's ``lora_dropout`` in training); a model without keys, e.g. the sampler's,
    does not."""
    for i, (_, node) in enumerate(nnx.iter_graph(model)):
        if isinstance(node, LoRA) and node.dropout:
            node.dropout_key = LoRADropoutKey(jax.random.fold_in(key, i))
