"""The jitted, donated train step: loss by name, exact gradient accumulation, clipping, AdamW, NaN guard.

``make_train_step(graphdef, "grpo", {"beta": 0.001}, mesh=mesh, micro_batches=4)`` returns
``train_step(state, batch) -> (state, metrics)``. The step looks the loss up in ``losses`` (``losses.spec``)
and feeds it through its family (``families.py``: the model's log-probs / logits for that family); the
loss's declared normalisation (``losses/normalisation.py``) turns its output on micro-batch m into
(numerator_m, denominator_m), and the step divides the summed numerators and gradients by the summed
denominators, so accumulating over M micro-batches gives the full-batch gradient (up to fp32 summation
order). A loss's ``prepare`` hook (batch-global statistics) runs once on the whole batch before the split.
A non-finite loss or gradient leaves params, optimizer state and step unchanged and reports
``loss_is_finite = False``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rewardsql_jax import losses
from rewardsql_jax.distributed import to_global
from rewardsql_jax.losses.shapes import ChoiceError
from rewardsql_jax.models.adapters import dropout_on
from rewardsql_jax.models.config import resolve_dtype
from rewardsql_jax.models.registry import build_model

from .families import FAMILY_OPTIONS, Family, family
from .padding import RealRows, pad_batch, padded_rows
from .sharding import batch_shardings, micro_batch_sharding, state_shardings
from .state import TrainState, merge_model


def with_compute_dtype(graphdef, params, compute_dtype, frozen=None):
    """The graphdef of the same model computing in ``compute_dtype`` (weights keep their storage dtype);
    ``frozen``: a LoRA state's base weights (``TrainState.frozen``)."""
    if compute_dtype is None:
        return graphdef
    cfg = merge_model(graphdef, params, frozen).config
    name = resolve_dtype(compute_dtype).name
    if cfg.dtype == name:
        return graphdef
    abstract = nnx.eval_shape(lambda: build_model(cfg.replace(dtype=name)))
    return nnx.split(abstract, nnx.Param, ...)[0]


def _split_micro(batch, m: int, mesh):
    """[B, ...] -> [M, B/M, ...] taking rows m, m+M, ... so each device's rows spread over every micro-batch."""

    def one(x):
        y = x.reshape(x.shape[0] // m, m, *x.shape[1:]).swapaxes(0, 1)
        return y if mesh is None else jax.lax.with_sharding_constraint(y, micro_batch_sharding(mesh))

    return jax.tree.map(one, batch)


def loss_and_grads(
    params,
    ref_params,
    graphdef,
    batch,
    *,
    loss_name: str,
    loss_options: dict | None = None,
    micro_batches: int = 1,
    mesh=None,
    frozen=None,
    dropout_key=None,
):
    """Full-batch loss, its gradient w.r.t. ``params`` and the metrics, accumulated over micro-batches.

    ``frozen``: the base weights of a LoRA model whose ``params`` are its adapters (``TrainState.frozen``; no
    gradient is taken for them). ``dropout_key``: the key of the adapters' dropout (``LoRAConfig.dropout`` > 0),
    one per micro-batch folded from it; without it, or without adapter dropout, the forward is deterministic.
    Returns ``(loss, grads, metrics)``; metrics of the loss function are averaged over micro-batches,
    ``loss`` and ``grads`` are exact (sum of numerators / sum of denominators).
    """
    spec = losses.spec(loss_name)
    fam = family(spec.family)
    opts = dict(loss_options or {})
    ref_model = None if ref_params is None else merge_model(graphdef, jax.lax.stop_gradient(ref_params), frozen)
    extra = {}
    if spec.prepare is not None:  # batch-global statistics, before the split into micro-batches
        assert fam.prepare is not None, f"losses.register refuses a prepare hook in family {spec.family!r}"
        fixed = merge_model(graphdef, jax.lax.stop_gradient(params), frozen)
        batch, opts, extra = fam.prepare(fixed, ref_model, batch, spec, opts)

    def numerator(p, mb, key):
        model = merge_model(graphdef, p, frozen)
        if key is not None:
            dropout_on(model, key)
        w = fam.weighted(model, ref_model, mb, spec, opts)
        return w.total, (w.count, w.metrics)

    grad_fn = jax.value_and_grad(numerator, has_aux=True)
    keys = None if dropout_key is None else jax.random.split(dropout_key, micro_batches)
    if micro_batches == 1:
        (total, (count, metrics)), grads = grad_fn(params, batch, None if keys is None else keys[0])
    else:

        def body(carry, xs):
            g_acc, t_acc, c_acc = carry
            (t, (c, mets)), g = grad_fn(params, *xs)
            return (jax.tree.map(jnp.add, g_acc, g), t_acc + t, c_acc + c), mets

        zeros = jax.tree.map(jnp.zeros_like, params)
        (grads, total, count), stacked = jax.lax.scan(
            body, (zeros, jnp.float32(0), jnp.float32(0)), (_split_micro(batch, micro_batches, mesh), keys)
        )
        metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), stacked)
    denom = jnp.maximum(count, 1.0)
    grads = jax.tree.map(lambda g: g / denom, grads)
    metrics = {**metrics, **extra, "loss_denominator": count}
    return total / denom, grads, metrics


def _apply(state: TrainState, graphdef, batch, loss_name, options, micro_batches, mesh):
    rng, dropout_key = jax.random.split(jax.random.wrap_key_data(state.rng))
    loss, grads, metrics = loss_and_grads(
        state.params,
        state.ref_params,
        graphdef,
        batch,
        loss_name=loss_name,
        loss_options=options,
        micro_batches=micro_batches,
        mesh=mesh,
        frozen=state.frozen,
        dropout_key=dropout_key,
    )
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

    # The non-finite guard as a branch, not as jnp.where(finite, new, old) over every leaf: with the select, the
    # old optimizer moments are read both by the fusion writing the new ones in place (donated) and by the
    # parameter update, so XLA copied all of them (2 x 50 MB at 12M parameters) before every step.
    def update(operands):
        params, opt_state, grads = operands
        updates, opt_state = state.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def skip(operands):
        return operands[0], operands[1]

    params, opt_state = jax.lax.cond(finite, update, skip, (state.params, state.opt_state, grads))
    new_state = state.replace(
        params=params,
        opt_state=opt_state,
        step=state.step + finite.astype(state.step.dtype),
        rng=jnp.where(finite, jax.random.key_data(rng), state.rng),
    )
    metrics = {**metrics, "loss": loss, "grad_norm": grad_norm, "loss_is_finite": finite}
    return new_state, metrics


class TrainStep:
    """``train_step(state, batch) -> (new_state, metrics)``; jitted on the first call (state donated).

    With a mesh, in/out shardings come from the parameters' logical axes and the batch is split over
    ("data", "fsdp"); a batch whose micro-batches do not split evenly over those devices is padded with masked
    rows (``training.padding``: loss, gradients and metrics are the real rows'). Call ``.validate(batch)`` to
    check a batch without running it.
    """

    def __init__(self, graphdef, loss_name: str, options: dict, family: Family, *, mesh, micro_batches, compute_dtype):
        self.graphdef, self.loss_name, self.options = graphdef, loss_name, options
        self.family, self.mesh, self.micro_batches, self.compute_dtype = family, mesh, micro_batches, compute_dtype
        self._jitted: Callable | None = None
        self._treedef: tuple | None = None

    def validate(self, batch) -> None:
        """Raise ValueError if ``batch`` has the wrong type or shapes for this loss / micro-batching."""
        want = self.family.batch_type(losses.spec(self.loss_name))
        if not isinstance(batch, want):
            names = " or ".join(t.__name__ for t in want)
            raise ValueError(
                f"loss {self.loss_name!r} trains on {names}, got {type(batch).__name__}; "
                f"build a {names} (rewardsql_jax.training.batch)."
            )
        batch.validate()
        b = batch.batch_size
        if b % self.micro_batches:
            raise ValueError(
                f"batch size {b} is not divisible by micro_batches={self.micro_batches}; "
                f"make the batch a multiple of it."
            )

    @property
    def shards(self) -> int:
        """Devices a batch's rows split over: the mesh's data x fsdp axes (1 without a mesh)."""
        return 1 if self.mesh is None else self.mesh.shape["data"] * self.mesh.shape["fsdp"]

    def padded_rows(self, rows: int) -> int:
        """Rows a batch of ``rows`` rows is padded to on this step's mesh (``training.padding``)."""
        return padded_rows(rows, self.micro_batches, self.shards)

    def _build(self, state, batch, rows: int | None = None):
        """The jitted step for batches shaped like ``batch`` (already padded) holding ``rows`` real rows."""
        graphdef = with_compute_dtype(self.graphdef, state.params, self.compute_dtype, state.frozen)
        rows = batch.batch_size if rows is None else rows
        options = self.options
        if batch.batch_size != rows:  # the losses see each micro-batch's real rows only
            replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
            options = {**options, "real_rows": RealRows(rows // self.micro_batches, replicated)}

        def fn(state, batch):
            return _apply(state, graphdef, batch, self.loss_name, options, self.micro_batches, self.mesh)

        if self.mesh is None:
            return jax.jit(fn, donate_argnums=0)
        state_sh = state_shardings(state, self.mesh)
        replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
        return jax.jit(
            fn,
            donate_argnums=0,
            in_shardings=(state_sh, batch_shardings(batch, self.mesh)),
            out_shardings=(state_sh, replicated),
        )

    def __call__(self, state: TrainState, batch) -> tuple[TrainState, dict[str, Any]]:
        self.validate(batch)
        rows = batch.batch_size
        batch = pad_batch(batch, self.micro_batches, self.shards)  # rows that do not split evenly: masked padding
        treedef = (jax.tree.structure(state), jax.tree.structure(batch), rows, batch.batch_size)
        if self._jitted is None or treedef != self._treedef:  # other static parts / optional fields: rebuild
            self._jitted, self._treedef = self._build(state, batch, rows), treedef
        if self.mesh is not None:  # several processes: each fills its devices' rows of the same host batch
            batch = to_global(batch, batch_shardings(batch, self.mesh))
        return self._jitted(state, batch)


def check_loss_options(name: str, options: dict, *, where: str = "") -> None:
    """Unknown loss options and an option outside its choices (the normalisation's ``agg``) fail here, with the
    accepted names, instead of deep inside the first trace. ``where`` (e.g. "rl.loss_options") names the setting
    a bad choice came from."""
    spec = losses.spec(name)
    if spec.keywords is not None:  # None: the loss takes **options
        accepted = set(spec.keywords) | set(FAMILY_OPTIONS)
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise ValueError(f"loss {name!r} does not take option(s) {unknown}; it accepts {sorted(accepted)}.")
    try:
        spec.normalisation(options)
    except ChoiceError as e:
        if not where:
            raise
        raise ValueError(f"{where}.{e.name}={e.value!r}; choose one of {', '.join(e.choices)}") from None


def make_train_step(
    model_graphdef,
    loss_fn_name: str,
    loss_options: dict | None = None,
    *,
    mesh=None,
    micro_batches: int = 1,
    compute_dtype=None,
) -> TrainStep:
    """Build the train step for the loss registered as ``loss_fn_name`` with keyword ``loss_options``.

    ``micro_batches`` splits each batch for exact gradient accumulation; ``compute_dtype`` ("bfloat16")
    overrides the model's compute dtype while the fp32 master weights stay in the state. Unknown loss
    names raise ValueError listing the registered ones.
    """
    fam = family(losses.spec(loss_fn_name).family)
    check_loss_options(loss_fn_name, dict(loss_options or {}))
    if not isinstance(micro_batches, (int, np.integer)) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive integer, got {micro_batches!r}.")
    if compute_dtype is not None:
        resolve_dtype(compute_dtype)
    return TrainStep(
        model_graphdef,
        loss_fn_name,
        dict(loss_options or {}),
        fam,
        mesh=mesh,
        micro_batches=int(micro_batches),
        compute_dtype=compute_dtype,
    )
