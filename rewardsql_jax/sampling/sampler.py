"""KV-cache sampler: one jitted prefill, one jitted decode loop (``lax.while_loop``), donated state.

Flow of ``generate``: prompts are checked and left-padded on the host (``inputs.pad_prompts``); the
prefill runs each padded prompt once through ``hidden_with_cache`` into a prompt cache with one row
per prompt, projects only the last position to logits and draws token 0 for each of its ``num_samples``
rows; the decode loop feeds token ``i-1`` at slot ``i - 1`` of the rows' own cache of generated tokens,
attending to that and to the prompt cache (``models.attention_math.prefix_attention``: a GRPO group reads
its prompt's keys/values once, not once per sample), and draws token ``i`` until ``max_new_tokens``
or until every row has emitted an EOS id. Unsharded (one device's rows), the loop runs in segments of
``SEGMENT`` steps and the batch shrinks to the rows still running when they fit in half of it
(``keep_rows``); between segments only the rows' done flags leave the device. On a sharded
model (``SamplerOptions.mesh``) both caches and every per-row array are split over the mesh's batch
(data x fsdp) axes: one device holds only its rows' caches.

The model enters ``jit`` as ``(graphdef, state)`` with the graphdef static, so ``jax.jit``'s own
cache keys the compiled code by (graphdef, shapes, static options): a second call with the same
shapes reuses it. Temperature, top-p, EOS ids, pad id, seed and ``max_new_tokens`` are traced
values and never cause a recompile; greedy-vs-sampling, ``top_k`` and whether top-p is active are
static.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ..distributed import fetch, process_count, spans_processes, to_global
from ..models.sharding import activation_sharding, constrain, model_mesh
from ..models.shared_prefix import common_prefix_hidden
from ..models.transformer import KVCache, init_cache, uses_pallas_kernels
from .inputs import check_options, normalize_eos, pad_prompts
from .logits_processing import sample_tokens
from .result import GenerationResult

# Number of times each jitted function was traced (tests assert same-shape calls do not retrace).
TRACE_COUNTS: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class SamplerOptions:
    """The sampler's compile-time options (a static argument of ``prefill`` / ``decode_loop``)."""

    greedy: bool
    top_k: int
    use_top_p: bool
    cache_len: int
    gen_capacity: int
    num_samples: int = 1
    real_prompts: int | None = None  # prompts after the first ``real_prompts`` are padding (done from the start)
    mesh: Mesh | AbstractMesh | None = (
        None  # the model's mesh: the caches and per-row state are laid out over its batch axes
    )


@struct.dataclass
class DecodeState:
    """Loop carry: the prompts' KV cache (``[N, W]``, one row per prompt, read-only), each row's cache of
    generated tokens (``[B, gen_capacity]``, B = N x num_samples), output buffers ``[B, gen_capacity]``,
    per-row done flags, step, key."""

    if TYPE_CHECKING:  # added by flax.struct.dataclass

        def replace(self, **updates: Any) -> DecodeState: ...

    prompt_cache: KVCache  # [N, Hkv, W, D] per layer
    prompt_mask: jax.Array  # [N, W] real prompt slots (left padding is False)
    cache: KVCache  # [B, Hkv, gen_capacity, D] per layer
    lengths: jax.Array  # [B] prompt lengths; token i sits at position lengths + i
    tokens: jax.Array
    logprobs: jax.Array
    done: jax.Array
    step: jax.Array  # number of tokens produced so far
    key: jax.Array
    common_cache: KVCache | None = None  # [1, Hkv, C, D] per layer: what every prompt starts with (prefill_shared)


_CACHE_AXES = ("cache_batch", "cache_kv_heads", "cache_seq", "head_dim")  # heads-first [B, Hkv, S, D]


def _rows_over_mesh(st: DecodeState, mesh: Mesh | AbstractMesh | None, *, prompt_cache: bool = True) -> DecodeState:
    """``st`` with its caches and per-row arrays split over the mesh's batch (data x fsdp) axes by the rules table,
    so no device holds every row's cache (without this the generated-token cache, made from constant zeros,
    comes out of the prefill replicated on every device). ``prompt_cache=False`` leaves the prompt cache as the
    forward lays it out (the prefill: it is split over the devices already, and forcing the rows layout there
    re-lays out every layer's activations: +0.14 GB of temporaries per layer for Qwen2.5-Coder-32B on 1x8x8);
    the decode loop lays it out over the rows at entry. No mesh: ``st`` unchanged."""
    if mesh is None:
        return st

    def cache(c: KVCache) -> KVCache:
        return jax.tree.map(lambda x: constrain(x, _CACHE_AXES, mesh), c)

    rows, table = (lambda x: constrain(x, ("batch",), mesh)), (lambda x: constrain(x, ("batch", "seq"), mesh))
    return st.replace(
        prompt_cache=cache(st.prompt_cache) if prompt_cache else st.prompt_cache,
        prompt_mask=table(st.prompt_mask),
        cache=cache(st.cache),
        lengths=rows(st.lengths),
        tokens=table(st.tokens),
        logprobs=table(st.logprobs),
        done=rows(st.done),
    )


def _split(key):
    """``(key, subkey)`` of one key, or of each row's key (``[B]`` keys: ``generate`` with one seed a prompt)."""
    if key.ndim == 0:
        return jax.random.split(key)
    pairs = jax.vmap(jax.random.split)(key)
    return pairs[:, 0], pairs[:, 1]


def _draw(key, logits, temperature, top_p, opts: SamplerOptions):
    draw = functools.partial(
        sample_tokens,
        temperature=temperature,
        greedy=opts.greedy,
        top_k=opts.top_k,
        top_p=top_p,
        use_top_p=opts.use_top_p,
    )
    if key.ndim == 1:  # one key a row: each row's draw depends on its own key alone, not on the batch around it
        tok, logp = jax.vmap(lambda k, row: draw(k, row[None]))(key, logits)
        return tok[:, 0], logp[:, 0]
    return draw(key, logits)


def _is_eos(tokens, eos_ids):
    return jnp.any(tokens[:, None] == eos_ids[None, :], axis=-1)


def _padding_rows(rows: int, opts: SamplerOptions):
    """[rows] True on the rows of padding prompts (``pad_to_mesh``), which the decode loop never waits for."""
    if opts.real_prompts is None:
        return jnp.zeros((rows,), bool)
    return jnp.arange(rows) >= opts.real_prompts * opts.num_samples


def _row_keys(seeds, num_samples: int, rows: int):
    """``[rows * num_samples]`` keys from one seed a prompt (padding rows, ``pad_to_mesh``, repeat the last)."""
    seeds = [int(x) & 0xFFFFFFFF for x in seeds]
    if not seeds:
        raise ValueError("generate: seed is an empty list")
    seeds += seeds[-1:] * (rows - len(seeds))
    base = jax.vmap(jax.random.key)(jnp.asarray(np.asarray(seeds, np.uint32)))
    per_sample = jax.vmap(lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(jnp.arange(num_samples)))(base)
    return per_sample.reshape(-1)


def pad_to_mesh(arrays, mesh):
    """Prompt arrays ``[N, ...]`` padded to a multiple of the mesh's data x fsdp devices (copies of the last
    prompt) and laid out with their rows over those devices (every process fills its own devices' rows).
    Returns ``(arrays, N)``: the sampler marks the padding rows done and drops them from the result."""
    n = arrays[0].shape[0]
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    extra = -n % shards
    if extra:
        arrays = tuple(np.concatenate([x, np.repeat(x[-1:], extra, axis=0)]) for x in arrays)
    shardings = tuple(activation_sharding(("batch",), mesh) for _ in arrays)
    if process_count() > 1:  # each process fills its own devices' rows of the same host prompts
        return to_global(arrays, shardings), n
    return tuple(jax.device_put(x, s) for x, s in zip(arrays, shardings)), n


@functools.partial(jax.jit, static_argnames=("graphdef", "opts"))
def prefill(graphdef, state, ids, mask, lengths, key, temperature, top_p, eos_ids, pad_id, *, opts):
    """Jitted: the prompts' KV cache and each row's first token (``generate``'s first call; the planner lowers it)."""
    TRACE_COUNTS["prefill"] += 1
    model = nnx.merge(graphdef, state)
    n, width = ids.shape
    prompt_cache = init_cache(model.config, n, width)
    positions = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)
    hidden, prompt_cache = model.hidden_with_cache(ids, positions, prompt_cache, write_index=0, key_mask=mask)
    logits = model.logits_from_hidden(hidden[:, -1])  # left padding: the last slot is real for every row
    return _first_tokens(  # the prompt cache [N, Hkv, W, D], read in place by prefix_attention
        model,
        prompt_cache=prompt_cache.as_heads_first(),
        prompt_mask=mask,
        logits=logits,
        lengths=lengths,
        key=key,
        temperature=temperature,
        top_p=top_p,
        eos_ids=eos_ids,
        pad_id=pad_id,
        opts=opts,
    )


@functools.partial(jax.jit, static_argnames=("graphdef", "opts"))
def prefill_shared(graphdef, state, prefix_ids, ids, mask, lengths, key, temperature, top_p, eos_ids, pad_id, *, opts):
    """Jitted: as ``prefill`` for prompts that all begin with ``prefix_ids`` (``PaddedBatch.prefix``): the prefix
    runs once, the rest of each prompt attends to it (``models.shared_prefix.common_prefix_hidden``). The decode
    loop then reads the prefix's cache once a batch (``DecodeState.common_cache``); for the Pallas decoding
    kernel, which reads one cache a prompt, it is copied before each prompt's own (``[N, Hkv, C + W, D]``)."""
    TRACE_COUNTS["prefill_shared"] += 1
    model = nnx.merge(graphdef, state)
    n, c = ids.shape[0], prefix_ids.shape[0]
    hidden, head, rows = common_prefix_hidden(model, prefix_ids, ids, mask)
    logits = model.logits_from_hidden(hidden[:, -1])
    start = functools.partial(_first_tokens, model, logits=logits, lengths=lengths, key=key, opts=opts)
    start = functools.partial(start, temperature=temperature, top_p=top_p, eos_ids=eos_ids, pad_id=pad_id)
    mask = mask.astype(bool)
    if not uses_pallas_kernels(model.config.attention_impl):
        return start(prompt_cache=rows, prompt_mask=mask, common_cache=head)

    def whole(h, r):
        return jnp.concatenate([jnp.broadcast_to(h, (n, *h.shape[1:])), r], axis=2)

    prompt_cache = KVCache(k=tuple(map(whole, head.k, rows.k)), v=tuple(map(whole, head.v, rows.v)), heads_first=True)
    return start(prompt_cache=prompt_cache, prompt_mask=jnp.concatenate([jnp.ones((n, c), bool), mask], axis=1))


def _first_tokens(
    model,
    *,
    prompt_cache,
    prompt_mask,
    logits,
    lengths,
    key,
    temperature,
    top_p,
    eos_ids,
    pad_id,
    opts,
    common_cache=None,
):
    """The decode loop's starting state: each row's token 0 drawn from its prompt's last logits."""
    if opts.num_samples > 1:  # each prompt was prefilled once; its samples share that prompt cache from here on
        rep = functools.partial(jnp.repeat, repeats=opts.num_samples, axis=0)
        logits, lengths = rep(logits), rep(lengths)
    b = logits.shape[0]
    cache = init_cache(model.config, b, opts.gen_capacity, heads_first=True)
    key, sub = _split(key)
    tok, logp = _draw(sub, logits, temperature, top_p, opts)
    tokens = jnp.full((b, opts.gen_capacity), pad_id, jnp.int32).at[:, 0].set(tok)
    logprobs = jnp.zeros((b, opts.gen_capacity), jnp.float32).at[:, 0].set(logp)
    st = DecodeState(
        prompt_cache=prompt_cache,
        prompt_mask=prompt_mask,
        cache=cache,
        lengths=lengths,
        tokens=tokens,
        logprobs=logprobs,
        done=_is_eos(tok, eos_ids) | _padding_rows(b, opts),
        step=jnp.int32(1),
        key=key,
        common_cache=common_cache,
    )
    return _rows_over_mesh(st, opts.mesh, prompt_cache=False)


@functools.partial(jax.jit, static_argnames=("graphdef", "opts"), donate_argnames=("st",))
def decode_loop(graphdef, state, st: DecodeState, max_new_tokens, temperature, top_p, eos_ids, pad_id, *, opts):
    """Jitted: the decode loop from ``prefill``'s state until step ``max_new_tokens`` or every row is done."""
    TRACE_COUNTS["decode"] += 1
    model = nnx.merge(graphdef, state)
    all_slots = jnp.ones((st.tokens.shape[0], opts.gen_capacity), bool)  # the causal rule hides unwritten ones

    def cond(s: DecodeState):
        return (s.step < max_new_tokens) & ~jnp.all(s.done)

    def body(s: DecodeState):
        i = s.step
        prev = jax.lax.dynamic_slice_in_dim(s.tokens, i - 1, 1, axis=1)  # [B, 1]
        pos = (s.lengths + i - 1)[:, None]
        prefix = (s.prompt_cache, s.prompt_mask) + (() if s.common_cache is None else (s.common_cache,))
        logits, cache = model.forward_with_cache(
            prev, pos, s.cache, write_index=i - 1, key_mask=all_slots, prefix=prefix
        )
        key, sub = _split(s.key)
        tok, logp = _draw(sub, logits[:, 0], temperature, top_p, opts)
        tok = jnp.where(s.done, pad_id, tok)
        logp = jnp.where(s.done, 0.0, logp)
        tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens, tok[:, None], i, axis=1)
        logprobs = jax.lax.dynamic_update_slice_in_dim(s.logprobs, logp[:, None], i, axis=1)
        done = s.done | _is_eos(tok, eos_ids)
        s = s.replace(cache=cache, tokens=tokens, logprobs=logprobs, done=done, step=i + 1, key=key)
        return _rows_over_mesh(s, opts.mesh)

    return jax.lax.while_loop(cond, body, _rows_over_mesh(st, opts.mesh))


SEGMENT = 16  # decode steps between looks at which rows have ended (``generate`` drops them then)
MIN_ROWS = 8  # a batch is not cut below this many rows


@jax.jit
def keep_rows(st: DecodeState, keep) -> DecodeState:
    """Jitted: the rows ``keep`` ``[R]`` of ``st`` (a smaller batch once rows have ended). Each kept row gets its
    own copy of its prompt's cache (from then on one row a prompt); the common prefix stays shared."""
    g = st.tokens.shape[0] // st.prompt_mask.shape[0]  # rows a prompt: prompt of row r is r // g
    prompts = keep // g

    def take(x, idx):
        return jnp.take(x, idx, axis=0)

    return st.replace(
        prompt_cache=jax.tree.map(lambda x: take(x, prompts), st.prompt_cache),
        prompt_mask=take(st.prompt_mask, prompts),
        cache=jax.tree.map(lambda x: take(x, keep), st.cache),
        lengths=take(st.lengths, keep),
        tokens=take(st.tokens, keep),
        logprobs=take(st.logprobs, keep),
        done=take(st.done, keep),
        key=take(st.key, keep) if st.key.ndim else st.key,
    )


def _decode_dropping_ended_rows(graphdef, state, st: DecodeState, max_new_tokens: int, args, opts):
    """``decode_loop`` in segments of ``SEGMENT`` steps; after a segment, when the rows still running fit in half
    the batch (or less), the batch shrinks to them (``keep_rows``, rounded up to a power of two): the steps left
    cost what the live rows cost, not what the longest row of the original batch does. Returns host arrays
    ``(tokens, logprobs, steps)`` in the original row order."""
    tokens, logprobs = (np.asarray(x).copy() for x in fetch((st.tokens, st.logprobs)))
    rows = np.arange(tokens.shape[0])  # the original row of each state row; rows past ``real`` are padding
    real, step = len(rows), 1
    while True:
        stop = min(max_new_tokens, step + SEGMENT)
        st = decode_loop(graphdef, state, st, jnp.int32(stop), *args, opts=opts)
        done, reached = fetch((st.done, st.step))
        done, step = np.asarray(done), int(reached)
        live = np.flatnonzero(~done[:real])
        if step >= max_new_tokens or not live.size:
            break
        size = max(MIN_ROWS, 1 << (len(live) - 1).bit_length())
        if size >= len(rows):
            continue
        now_t, now_l = fetch((st.tokens, st.logprobs))
        tokens[rows[:real]], logprobs[rows[:real]] = np.asarray(now_t)[:real], np.asarray(now_l)[:real]
        ended = np.flatnonzero(done)[0]  # padding rows copy an ended row: they stay ended
        keep = np.concatenate([live, np.full(size - len(live), ended)])
        st = keep_rows(st, jnp.asarray(keep, jnp.int32))
        rows, real = rows[keep], len(live)
    now_t, now_l = fetch((st.tokens, st.logprobs))
    tokens[rows[:real]], logprobs[rows[:real]] = np.asarray(now_t)[:real], np.asarray(now_l)[:real]
    return tokens, logprobs, step


def _to_lists(tokens, logprobs, max_new_tokens, eos: tuple[int, ...]):
    """Cut every row after its first EOS (kept) or at ``max_new_tokens``."""
    out_tokens, out_logprobs, finished = [], [], []
    eos_arr = np.asarray(eos, dtype=np.int64)
    for row_t, row_l in zip(tokens[:, :max_new_tokens], logprobs[:, :max_new_tokens]):
        hits = np.flatnonzero(np.isin(row_t, eos_arr)) if eos else np.empty(0, np.int64)
        end = int(hits[0]) + 1 if hits.size else len(row_t)
        out_tokens.append([int(t) for t in row_t[:end]])
        out_logprobs.append([float(x) for x in row_l[:end]])
        finished.append(bool(hits.size))
    return out_tokens, out_logprobs, finished


def generate(
    model,
    prompt_ids,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    num_samples: int = 1,
    eos_token_id=None,
    seed: int | list = 0,
    pad_id: int = 0,
    max_cache_len: int | None = None,
    share_prefix: bool = True,
) -> GenerationResult:
    """Sample continuations of a batch of token-id prompts with a KV cache.

    ``prompt_ids``: list of prompts (lists of ints, any lengths). Each prompt is repeated
    ``num_samples`` times; rows are prompt-major. ``temperature=0`` is greedy; otherwise tokens are
    drawn from ``softmax(logits / temperature)`` restricted by ``top_k`` (0 = off) then ``top_p``
    (nucleus, HF semantics; 1 = off). ``eos_token_id``: an id or a list of ids; a row stops after
    emitting one (the EOS is included in ``tokens``), then emits ``pad_id``. ``max_cache_len`` fixes the
    KV-cache length (longest prompt + ``max_new_tokens`` must fit); by default it is the prompt bucket
    plus ``max_new_tokens`` rounded up to 16. ``share_prefix``: when every prompt starts with the same 32 or more
    tokens (the questions of one database behind its schema), that part is prefilled once for the batch
    (``prefill_shared``; not on a model split over several devices' rows, nor with ``max_cache_len``); the
    tokens drawn are those of separate prefills up to fp32 summation order. Same ``seed`` -> same samples. ``seed`` may be a list, one
    seed a prompt: each row is then drawn with its own key (sample ``j`` of prompt ``i`` from
    ``fold_in(key(seed[i]), j)``), so a prompt's continuation does not depend on the batch it is in.

    Returns a ``GenerationResult`` (``tokens``, ``logprobs`` under ``log_softmax(logits / T)``,
    ``prompt_lengths``, ``finished``).
    """
    check_options(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, num_samples=num_samples
    )
    if not isinstance(seed, (int, np.integer)) and len(seed) != len(prompt_ids):
        raise ValueError(f"generate: {len(seed)} seeds for {len(prompt_ids)} prompts (give one seed, or one a prompt)")
    cfg = model.config
    eos = normalize_eos(eos_token_id)
    bad = [e for e in eos if not 0 <= e < cfg.vocab_size]
    if bad:
        raise ValueError(f"eos_token_id {bad} outside the vocabulary [0, {cfg.vocab_size})")
    if max_cache_len is not None and (not isinstance(max_cache_len, (int, np.integer)) or max_cache_len < 2):
        raise ValueError(f"max_cache_len must be an integer >= 2 or None, got {max_cache_len!r}")
    graphdef, state = nnx.split(model)
    mesh = model_mesh(state)
    one_row_shard = mesh is None or mesh.shape["data"] * mesh.shape["fsdp"] == 1
    batch = pad_prompts(
        prompt_ids,
        num_samples=num_samples,
        pad_id=pad_id,
        max_new_tokens=max_new_tokens,
        max_cache_len=max_cache_len,
        max_positions=cfg.max_position_embeddings,
        vocab_size=cfg.vocab_size,
        share_prefix=share_prefix and one_row_shard,
    )
    greedy = temperature == 0
    opts = SamplerOptions(
        greedy=greedy,
        top_k=int(top_k) if not greedy else 0,
        use_top_p=(not greedy) and top_p < 1.0,
        cache_len=batch.cache_len,
        gen_capacity=batch.gen_capacity,
        num_samples=num_samples,
    )
    ids, mask, lengths = batch.ids, batch.mask, batch.lengths
    if mesh is not None:  # the prompts' rows over the data x fsdp devices, padded to split evenly
        (ids, mask, lengths), n = pad_to_mesh((ids, mask, lengths), mesh)
        opts = dataclasses.replace(opts, real_prompts=n if ids.shape[0] != n else None, mesh=mesh)
    temp = jnp.float32(temperature if not greedy else 1.0)
    p = jnp.float32(top_p)
    # -1 never matches a token; padding the id list to a multiple of 4 keeps its shape (and the compile) stable.
    width = max(4, -(-len(eos) // 4) * 4)
    eos_ids = jnp.asarray(eos + (-1,) * (width - len(eos)), dtype=jnp.int32)
    pad = jnp.int32(pad_id)
    if spans_processes(state):  # a model sharded over several processes: the scalars enter replicated
        assert mesh is not None, "a model that spans processes is sharded over a mesh"
        replicated = NamedSharding(mesh, PartitionSpec())
        temp, p, eos_ids, pad = to_global(tuple(np.asarray(x) for x in (temp, p, eos_ids, pad)), (replicated,) * 4)
    key = jax.random.key(seed) if isinstance(seed, (int, np.integer)) else _row_keys(seed, num_samples, ids.shape[0])
    if key.ndim and spans_processes(state):
        raise ValueError("generate: one seed a prompt is not supported for a model sharded over several processes")
    if batch.prefix.size:
        prefix = jnp.asarray(batch.prefix)
        st = prefill_shared(graphdef, state, prefix, ids, mask, lengths, key, temp, p, eos_ids, pad, opts=opts)
    else:
        st = prefill(graphdef, state, ids, mask, lengths, key, temp, p, eos_ids, pad, opts=opts)
    if one_row_shard and ids.shape[0] * num_samples > MIN_ROWS and max_new_tokens > SEGMENT:
        args = (temp, p, eos_ids, pad)
        tokens, logprobs, steps = _decode_dropping_ended_rows(graphdef, state, st, max_new_tokens, args, opts)
    else:
        st = decode_loop(graphdef, state, st, jnp.int32(max_new_tokens), temp, p, eos_ids, pad, opts=opts)
        tokens, logprobs, steps = fetch((st.tokens, st.logprobs, st.step))
    real_rows = len(batch.lengths) * num_samples  # the padding prompts' rows are dropped
    tokens, logprobs = tokens[:real_rows], logprobs[:real_rows]
    out_tokens, out_logprobs, finished = _to_lists(tokens, logprobs, max_new_tokens, eos)
    return GenerationResult(
        tokens=out_tokens,
        logprobs=out_logprobs,
        prompt_lengths=[int(n) for n in batch.lengths for _ in range(num_samples)],
        finished=finished,
        num_samples=num_samples,
        steps=int(steps),
    )
