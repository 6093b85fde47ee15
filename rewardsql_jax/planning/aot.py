"""AOT memory planning: lower and compile the real train step and sampler for abstract inputs on a mesh.

Nothing is allocated: the model and train state are built with ``eval_shape``, their shardings come from
the parameters' ``logical_axes`` through the rules table, and every input is a ``ShapeDtypeStruct``
carrying its ``NamedSharding``. The programs compiled are the library's own: ``make_train_step``'s jitted
function and the sampler's jitted prefill and decode loop, so the compiler's memory and FLOP numbers
describe exactly what a run would execute on that mesh (for the compiling backend: simulated CPU devices
stand in for accelerators, so fusion and layout choices may differ somewhat from TPU/GPU).
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from rewardsql_jax import losses
from rewardsql_jax.models.config import ModelConfig, resolve_dtype
from rewardsql_jax.models.registry import build_model
from rewardsql_jax.models.sharding import activation_sharding, logical_to_spec, make_mesh, param_shardings
from rewardsql_jax.sampling import sampler
from rewardsql_jax.sampling.inputs import GEN_ROUND, prompt_width
from rewardsql_jax.training.batch import GroupedRLBatch, RLBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.sharding import batch_shardings, state_shardings
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .devices import planning_devices
from .result import CompiledStats, Plan

# the options plan_memory gives its default loss when none are passed (Reward-SQL Sec. 5.3's GRPO)
GRPO_OPTIONS = {"clip_eps": 0.2, "beta": 0.001, "kl": "k3", "temperature": 1.0}


def rl_batch_field(loss: str) -> str:
    """The train-batch field an online RL step of ``loss`` fills (its ``LossSpec.reads``); a loss of another
    family than policy_gradient has no online RL step and raises ValueError naming the ones that do."""
    if losses.family(loss) != "policy_gradient":
        raise ValueError(
            f"loss={loss!r} is a {losses.family(loss)} loss; the RL plan compiles an online policy-gradient step: "
            f"pick one of {losses.names('policy_gradient')}"
        )
    return losses.spec(loss).reads


def shard_bytes(tree, shardings) -> int:
    """Bytes one device holds of ``tree`` (abstract arrays) laid out by ``shardings`` (the same tree of
    NamedShardings); the largest shard is counted, as every device allocates the padded shard."""
    total = 0
    for x, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
        total += math.prod(s.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
    return total


def abstract_like(tree, shardings):
    """``tree`` as ``jax.ShapeDtypeStruct`` leaves with ``shardings`` (the inputs a step is lowered for)."""
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def compiled_stats(name: str, lowered) -> tuple[CompiledStats, Any]:
    """Compile ``lowered``: (its memory / FLOP numbers as ``CompiledStats`` named ``name``, the compiled object)."""
    t0 = time.perf_counter()
    compiled = lowered.compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax returns one dict per partition
        cost = cost[0] if cost else {}
    return CompiledStats(
        name=name,
        argument_bytes=int(mem.argument_size_in_bytes),
        output_bytes=int(mem.output_size_in_bytes),
        alias_bytes=int(mem.alias_size_in_bytes),
        temp_bytes=int(mem.temp_size_in_bytes),
        generated_code_bytes=int(mem.generated_code_size_in_bytes),
        flops=float((cost or {}).get("flops", 0.0)),
        compile_seconds=seconds,
    ), compiled


def train_seq_len(prompt_len: int, response_len: int) -> int:
    """The padded row length of an RL train batch (as ``training.collate.rl_length``)."""
    return prompt_width(prompt_len + response_len)


def analytic_kv_cache_bytes(
    cfg: ModelConfig, rows: int, cache_len: int, mesh, *, samples: int = 1, gen_capacity: int = 0
) -> int:
    """Per-device KV cache of the sampler: 2 (K, V) x layers x (a ``[rows / samples, prompt slots, kv_heads,
    head_dim]`` prompt cache, one row per prompt, + a ``[rows, gen_capacity, ...]`` cache of generated
    tokens) in the compute dtype, sharded by the ``cache_*`` rules. ``cache_len`` = prompt slots +
    ``gen_capacity``."""

    def one(shape):
        spec = logical_to_spec(("cache_batch", "cache_seq", "cache_kv_heads", "head_dim"), shape=shape, mesh=mesh)
        return math.prod(NamedSharding(mesh, spec).shard_shape(shape))

    kv = (cfg.num_key_value_heads, cfg.head_dim)
    elems = one((rows // samples, cache_len - gen_capacity) + kv) + (
        one((rows, gen_capacity) + kv) if gen_capacity else 0
    )
    return 2 * cfg.num_hidden_layers * elems * resolve_dtype(cfg.dtype).itemsize


def matmul_params(cfg: ModelConfig, num_params: int) -> int:
    """Parameters used in matmuls: all but the input embedding table (a gather) unless it is tied."""
    return num_params if cfg.tie_word_embeddings else num_params - cfg.vocab_size * cfg.hidden_size


def analytic_train_flops(
    cfg: ModelConfig, num_params: int, rows: int, seq: int, *, reference: bool, group: int = 1, response: int = 0
):
    """(6 N tokens, 6 N tokens + reference forward 2 N tokens + attention score/value matmuls), whole step.

    Attention per layer: 2 matmuls of 2 x queries x keys x H x D FLOPs forward (the model masks full score
    matrices), x3 for forward + backward, +1 forward for the reference model. ``group`` > 1: the shared-prefix
    layout (``GroupedRLBatch``), each of the ``rows / group`` prompts (``seq - response`` tokens) computed once
    and the ``response`` tokens of every row attending to prompt + response.
    """
    n = matmul_params(cfg, num_params)
    if group > 1:
        prompt = seq - response
        tokens = rows // group * prompt + rows * response
        scores = rows // group * prompt * prompt + rows * response * seq
    else:
        tokens, scores = rows * seq, rows * seq * seq
    six = 6.0 * n * tokens
    passes = 4 if reference else 3
    attention = passes * 4.0 * cfg.num_hidden_layers * scores * cfg.num_attention_heads * cfg.head_dim
    return six, six + (2.0 * n * tokens if reference else 0.0) + attention


def _batch_arrays(make, rows, seq, group, response, field="advantages"):
    """An online RL train batch (``field``: the loss's learning signal) whose leaves are ``make(shape, dtype)``:
    ``RLBatch`` rows of ``seq`` tokens (``group`` = 1) or a ``GroupedRLBatch`` of ``rows / group`` prompts of
    ``seq - response`` tokens."""
    per_token = dict(completion_mask=np.int32, old_logprobs=np.float32, **{field: np.float32})
    if group == 1:
        flat = dict(input_ids=np.int32, attention_mask=np.int32, **per_token)
        return RLBatch(**{k: make((rows, seq), np.dtype(d)) for k, d in flat.items()})
    prompts, prompt_len = rows // group, seq - response
    return GroupedRLBatch(
        prompt_ids=make((prompts, prompt_len), np.dtype(np.int32)),
        prompt_mask=make((prompts, prompt_len), np.dtype(np.int32)),
        completion_ids=make((prompts, group, response), np.dtype(np.int32)),
        **{k: make((prompts, group, response), np.dtype(d)) for k, d in per_token.items()},
    )


def _rl_batch(rows: int, seq: int, mesh, group: int = 1, response: int = 0, field: str = "advantages"):
    """Abstract online RL batch (the loss's ``field``, sampler log-probs; reference log-probs from the state)."""
    batch = _batch_arrays(jax.ShapeDtypeStruct, rows, seq, group, response, field)
    return abstract_like(batch, batch_shardings(batch, mesh))


def _lower_step(step, state, shardings, *, rows, seq, mesh, group, response, field):
    """``step`` lowered for abstract inputs as the run calls it: a batch whose micro-batches do not split over the
    data x fsdp devices runs padded with masked rows (``training.padding``), so it is lowered padded too."""
    real = rows // group
    batch = _rl_batch(step.padded_rows(real) * group, seq, mesh, group, response, field)
    return step._build(state, batch, real).lower(abstract_like(state, shardings), batch)


def _train_stats(
    cfg, mesh, *, rows, seq, loss, loss_options, micro_batches, compute_dtype, optimizer, reference, group=1, response=0
):
    tx = make_optimizer(optimizer)
    state = jax.eval_shape(lambda: create_train_state(build_model(cfg), tx, with_reference=reference))
    shardings = state_shardings(state, mesh)
    step = make_train_step(
        state.graphdef, loss, loss_options, mesh=mesh, micro_batches=micro_batches, compute_dtype=compute_dtype
    )
    # Zero-stride views: real numpy arrays for the step's shape checks, no memory behind them.
    field = rl_batch_field(loss)
    ones = _batch_arrays(lambda shape, d: np.broadcast_to(np.ones((), d), shape), rows, seq, group, response, field)
    step.validate(ones)
    lowered = _lower_step(
        step, state, shardings, rows=rows, seq=seq, mesh=mesh, group=group, response=response, field=field
    )
    stats, _ = compiled_stats("train step", lowered)
    params = shard_bytes(state.params, shardings.params)
    ref = shard_bytes(state.ref_params, shardings.ref_params) if reference else 0
    opt = shard_bytes(state.opt_state, shardings.opt_state)
    return stats, params, ref, opt


def _sampler_stats(cfg, mesh, *, rows, prompt_len, response_len, samples):
    model = nnx.eval_shape(lambda: build_model(cfg))
    graphdef, state = nnx.split(model)
    state = abstract_like(state, param_shardings(state, mesh))
    width, capacity = prompt_width(prompt_len), -(-response_len // GEN_ROUND) * GEN_ROUND
    opts = sampler.SamplerOptions(
        greedy=False,
        top_k=0,
        use_top_p=False,
        cache_len=width + capacity,
        gen_capacity=capacity,
        num_samples=samples,
        mesh=mesh,
    )
    rows = rows // samples  # the prefill takes each prompt once
    tokens = activation_sharding(("batch", "seq"), mesh, shape=(rows, width))
    repl = NamedSharding(mesh, PartitionSpec())

    def sds(shape, dtype, sh=repl):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sh)

    key = jax.eval_shape(lambda: jax.random.key(0))
    scalars = (sds((), jnp.float32), sds((), jnp.float32), sds((4,), jnp.int32), sds((), jnp.int32))
    lowered = sampler.prefill.lower(
        graphdef,
        state,
        sds((rows, width), jnp.int32, tokens),
        sds((rows, width), jnp.bool_, tokens),
        sds((rows,), jnp.int32, activation_sharding(("batch",), mesh, shape=(rows,))),
        sds(key.shape, key.dtype),
        *scalars,
        opts=opts,
    )
    prefill, compiled = compiled_stats("sampler prefill", lowered)
    # The decode loop takes the cache exactly as the compiled prefill lays it out.
    st = jax.tree.map(
        lambda i, s: jax.ShapeDtypeStruct(i.shape, i.dtype, sharding=s), lowered.out_info, compiled.output_shardings
    )
    kv_compiled = sum(
        math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
        for x in jax.tree.leaves((st.prompt_cache, st.cache))
    )
    decode_lowered = sampler.decode_loop.lower(graphdef, state, st, sds((), jnp.int32), *scalars, opts=opts)
    decode, _ = compiled_stats("sampler decode loop", decode_lowered)
    return prefill, decode, kv_compiled, opts.cache_len


def planning_mesh(mesh_shape, devices=None):
    """The ``(data, fsdp, tensor)`` mesh to compile for. ``devices``: None, a device count (needed when one
    axis is -1) or a list of devices."""
    given = None if devices is None or isinstance(devices, int) else list(devices)
    count = devices if isinstance(devices, int) else (None if given is None else len(given))
    if -1 in mesh_shape:
        if count is None:
            raise ValueError(f"mesh_shape={tuple(mesh_shape)} has a -1 axis; pass devices=N (a count) too")
        need = count
    else:
        need = math.prod(mesh_shape)
    return make_mesh(*mesh_shape, devices=planning_devices(need, given))


def _measure(cfg, mesh, **kw):
    """(train stats, prefill stats, decode stats, compiled KV bytes, param/ref/opt bytes, cache_len) for ``cfg``."""
    train, params, ref, opt = _train_stats(
        cfg,
        mesh,
        rows=kw["rows"],
        seq=kw["seq"],
        loss=kw["loss"],
        loss_options=kw["loss_options"],
        micro_batches=kw["micro_batches"],
        compute_dtype=kw["compute_dtype"],
        optimizer=kw["optimizer"],
        reference=kw["reference"],
        group=kw["group"],
        response=kw["response_len"],
    )
    prefill, decode, kv, cache_len = _sampler_stats(
        cfg,
        mesh,
        rows=kw["sample_rows"],
        prompt_len=kw["prompt_len"],
        response_len=kw["response_len"],
        samples=kw["samples"],
    )
    return train, prefill, decode, kv, (params, ref, opt), cache_len


def lowered_train_flops(
    cfg, mesh, *, rows, seq, loss, loss_options, compute_dtype, optimizer, reference, group=1, response=0
) -> float:
    """Whole-step FLOPs (all devices) from XLA's cost analysis of the step lowered without micro-batching.

    XLA's cost analysis counts a loop body once, so the micro-batched program (a scan) under-reports by the
    number of micro-batches; the unsplit step does the same arithmetic and has no loop. Lowering only traces.
    Rows that do not split over the data x fsdp devices are padded as the train step pads them (the padding rows'
    forward and backward are counted: the devices do that work).
    """
    tx = make_optimizer(optimizer)
    state = jax.eval_shape(lambda: create_train_state(build_model(cfg), tx, with_reference=reference))
    step = make_train_step(state.graphdef, loss, loss_options, mesh=mesh, micro_batches=1, compute_dtype=compute_dtype)
    shardings, field = state_shardings(state, mesh), rl_batch_field(loss)
    lowered = _lower_step(
        step, state, shardings, rows=rows, seq=seq, mesh=mesh, group=group, response=response, field=field
    )
    cost = lowered.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", 0.0))


def extrapolate_layers(lower: CompiledStats, upper: CompiledStats, compiled: int, layers: int) -> CompiledStats:
    """Linear in the layer count through the measurements at ``compiled - 1`` and ``compiled`` layers:
    f(k) + (L - k) (f(k) - f(k - 1)), k = ``compiled``.

    XLA's buffer assignment is not linear from the first layer: the 32B PRM step with LoRA grows 0.25 GB from 1 to 2
    layers and 0.84-0.89 GB per layer from 2 to 6 (benchmarks/RESULTS.md, 2026-12-05), so k = 2 can underestimate a
    deep model several-fold; k >= 3 measures the per-layer growth where it has settled.
    """

    def lin(a, b):
        return b + (layers - compiled) * (b - a)

    return CompiledStats(
        name=upper.name,
        argument_bytes=int(lin(lower.argument_bytes, upper.argument_bytes)),
        output_bytes=int(lin(lower.output_bytes, upper.output_bytes)),
        alias_bytes=int(lin(lower.alias_bytes, upper.alias_bytes)),
        temp_bytes=int(lin(lower.temp_bytes, upper.temp_bytes)),
        generated_code_bytes=int(lin(lower.generated_code_bytes, upper.generated_code_bytes)),
        flops=lin(lower.flops, upper.flops),
        compile_seconds=lower.compile_seconds + upper.compile_seconds,
    )


def check_compile_layers(compile_layers: int | None) -> None:
    """``compile_layers`` is None (the full depth) or >= 2 (two depths are compiled to extrapolate)."""
    if compile_layers is not None and compile_layers < 2:
        raise ValueError(
            f"compile_layers={compile_layers}: the plan compiles compile_layers - 1 and compile_layers layers and "
            f"extrapolates, so it must be >= 2 (3 or more for a faithful per-layer growth), or unset for the full depth"
        )


def plan_memory(
    model_config: ModelConfig,
    *,
    mesh_shape=(1, -1, 1),
    devices=None,
    prompts: int = 48,
    samples: int = 8,
    prompt_len: int = 8192,
    response_len: int = 512,
    loss: str = "grpo",
    loss_options: dict | None = None,
    micro_batches: int = 1,
    compute_dtype: str = "bfloat16",
    optimizer: OptimizerConfig | None = None,
    reference: bool = True,
    sample_prompts: int | None = None,
    hbm_gb: float | None = None,
    compile_layers: int | None = None,
    name: str | None = None,
    shared_prefix: bool = True,
) -> Plan:
    """Compile the online RL step of ``model_config`` for abstract inputs on a ``(data, fsdp, tensor)`` mesh.

    ``loss``: any registered policy-gradient loss; the batch carries the field the loss reads (``LossSpec.reads``:
    advantages or token rewards) and the step runs with ``loss_options`` (default ``GRPO_OPTIONS``, Reward-SQL's
    GRPO). A loss of another family raises ValueError before anything compiles.

    The train step trains on ``prompts * samples`` rows of ``prompt_len + response_len`` tokens (bucketed as
    the RL stage pads them) with ``micro_batches``-way accumulation, AdamW (``optimizer``, default
    ``OptimizerConfig()``) and, when ``reference``, a frozen reference copy of the weights (KL). The sampler is
    compiled for ``sample_prompts`` (default ``prompts``) x ``samples`` rows. ``compile_layers=None`` compiles
    the full depth; a number k below the layer count compiles k - 1 and k layers with the real widths and
    extrapolates the compiled numbers linearly (``extrapolate_layers``; stated in the plan). ``shared_prefix`` (the RL stage's
    default) plans the ``GroupedRLBatch`` layout: each prompt computed once for its ``samples`` completions,
    micro-batches of whole prompt groups; False plans ``prompts * samples`` independent rows. ``devices``: what to compile for
    (default: the backend's devices if enough, else simulated CPU devices; see ``planning.devices``).
    """
    rl_batch_field(loss)  # a policy-gradient loss, or a clear error before anything compiles
    mesh = planning_mesh(mesh_shape, devices)
    cfg = model_config.replace(dtype=resolve_dtype(compute_dtype).name)
    rows, sample_rows = prompts * samples, (sample_prompts or prompts) * samples
    seq = train_seq_len(prompt_len, response_len)
    kw: dict[str, Any] = dict(
        rows=rows,
        seq=seq,
        loss=loss,
        loss_options=dict(GRPO_OPTIONS if loss_options is None else loss_options),
        micro_batches=micro_batches,
        compute_dtype=compute_dtype,
        optimizer=optimizer or OptimizerConfig(),
        reference=reference,
        sample_rows=sample_rows,
        prompt_len=prompt_len,
        response_len=response_len,
        group=samples if shared_prefix else 1,
        samples=samples,
    )
    layers = cfg.num_hidden_layers
    abstract = nnx.eval_shape(lambda: build_model(cfg))
    num_params = sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    check_compile_layers(compile_layers)
    if compile_layers is None or compile_layers >= layers:
        train, prefill, decode, kv_compiled, sizes, cache_len = _measure(cfg, mesh, **kw)
        compiled_layers, extrapolated = layers, False
    else:
        k = compile_layers
        lower = _measure(cfg.replace(num_hidden_layers=k - 1), mesh, **kw)
        upper = _measure(cfg.replace(num_hidden_layers=k), mesh, **kw)
        train, prefill, decode = (extrapolate_layers(a, b, k, layers) for a, b in zip(lower[:3], upper[:3]))
        kv_compiled = int(upper[3] + (layers - k) * (upper[3] - lower[3]))
        sizes = _measure_sizes(cfg, mesh, kw)
        cache_len, compiled_layers, extrapolated = upper[5], k, True
    six, full = analytic_train_flops(
        cfg, num_params, rows, seq, reference=reference, group=kw["group"], response=response_len
    )
    flops = lowered_train_flops(
        cfg,
        mesh,
        rows=rows,
        seq=seq,
        loss=loss,
        loss_options=kw["loss_options"],
        compute_dtype=compute_dtype,
        optimizer=kw["optimizer"],
        reference=reference,
        group=kw["group"],
        response=response_len,
    )
    ndev = mesh.devices.size
    return Plan(
        model_name=name or cfg.model_type,
        num_params=num_params,
        num_layers=layers,
        mesh_shape=tuple(mesh.devices.shape),
        platform=mesh.devices.flat[0].platform,
        loss=loss,
        prompts=prompts,
        samples=samples,
        sample_rows=sample_rows,
        prompt_len=prompt_len,
        response_len=response_len,
        train_seq_len=seq,
        micro_batches=micro_batches,
        compute_dtype=cfg.dtype,
        param_dtype=cfg.param_dtype,
        param_bytes=sizes[0],
        ref_param_bytes=sizes[1],
        opt_state_bytes=sizes[2],
        kv_cache_bytes=analytic_kv_cache_bytes(
            cfg, sample_rows, cache_len, mesh, samples=samples, gen_capacity=-(-response_len // GEN_ROUND) * GEN_ROUND
        ),
        kv_cache_bytes_compiled=kv_compiled,
        train=train,
        prefill=prefill,
        decode=decode,
        train_flops=flops / ndev,
        analytic_flops_6nt=six / ndev,
        analytic_flops_full=full / ndev,
        hbm_bytes=None if hbm_gb is None else int(hbm_gb * 1e9),
        compiled_layers=compiled_layers,
        extrapolated=extrapolated,
        shared_prefix=shared_prefix,
    )


def _measure_sizes(cfg, mesh, kw):
    """(param, reference, optimizer-state) bytes per device of the full-depth state, without compiling."""
    tx = make_optimizer(kw["optimizer"])
    state = jax.eval_shape(lambda: create_train_state(build_model(cfg), tx, with_reference=kw["reference"]))
    sh = state_shardings(state, mesh)
    ref = shard_bytes(state.ref_params, sh.ref_params) if kw["reference"] else 0
    return policy_bytes(state, sh), ref, shard_bytes(state.opt_state, sh.opt_state)


def policy_bytes(state, shardings) -> int:
    """Bytes per device of the policy's weights in a train state: its parameters, and with LoRA the frozen base
    they adapt (the reference and the AdamW moments then cover the adapters alone)."""
    frozen = 0 if state.frozen is None else shard_bytes(state.frozen, shardings.frozen)
    return shard_bytes(state.params, shardings.params) + frozen
