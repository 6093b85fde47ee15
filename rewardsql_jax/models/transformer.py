"""Decoder-only transformer shared by the Qwen2 and Llama architectures (Flax NNX).

GQA attention with RoPE (HF "rotate_half" layout), RMSNorm, SwiGLU MLP, optional q/k/v bias, tied or
untied embeddings. Every parameter carries ``logical_axes`` metadata that ``models.sharding`` maps to
mesh axes through one rules table. Parameter names mirror the HF checkpoint names so that
``models.hf_keys`` is a plain table.

Padding: positions come from ``cumsum(attention_mask) - 1``, so left- and right-padded rows give the
logits of the unpadded sequence at real positions.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from .architecture import BlockOptions
from .attention_math import apply_rope, attention, causal_attention_in_query_chunks, prefix_attention, rope_tables
from .config import ModelConfig
from .lora import LoRA, LoRAConfig


def _param(rngs: nnx.Rngs, init, shape, dtype, logical_axes) -> nnx.Param:
    return nnx.Param(init(rngs.params(), shape, dtype), logical_axes=logical_axes)


_normal = jax.nn.initializers.normal(stddev=0.02)


class Linear(nnx.Module):
    """``y = x @ kernel (+ bias)``; kernel stored ``[in, out]`` (HF stores ``[out, in]``). With ``lora`` (a
    ``LoRAConfig`` that targets this projection) it adds the adapter's ``(x A B) * alpha / r`` (``models.lora``)."""

    def __init__(self, d_in, d_out, *, bias, axes, cfg: ModelConfig, rngs: nnx.Rngs, lora: LoRAConfig | None = None):
        key = rngs.params()
        self.kernel = nnx.Param(_normal(key, (d_in, d_out), cfg.weight_dtype), logical_axes=axes)
        self.bias = _param(rngs, jax.nn.initializers.zeros, (d_out,), cfg.weight_dtype, axes[1:]) if bias else None
        self.compute_dtype = cfg.compute_dtype
        # the adapter's key is derived from the kernel's: the base weights draw as they do without adapters
        self.lora = (
            LoRA(
                d_in,
                d_out,
                axes,
                lora,
                key=jax.random.fold_in(key, 1),
                compute_dtype=cfg.compute_dtype,
            )
            if lora is not None
            else None
        )

    def __call__(self, x):
        x = x.astype(self.compute_dtype)
        y = jnp.dot(x, self.kernel[...].astype(self.compute_dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.compute_dtype)
        if self.lora is not None:
            y = y + self.lora(x)
        return y


class RMSNorm(nnx.Module):
    """Root-mean-square norm computed in fp32, as HF Qwen2RMSNorm / LlamaRMSNorm."""

    def __init__(self, dim, *, eps, cfg: ModelConfig, rngs: nnx.Rngs):
        self.weight = _param(rngs, jax.nn.initializers.ones, (dim,), cfg.weight_dtype, ("norm",))
        self.eps = eps
        self.compute_dtype = cfg.compute_dtype

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...].astype(self.compute_dtype) * x32.astype(self.compute_dtype)


@struct.dataclass
class KVCache:
    """Per-layer key/value buffers ``[B, S_max, Hkv, D]`` (``[B, Hkv, S_max, D]`` when ``heads_first``: the
    sampler's layout, read in place by ``prefix_attention``); a pytree meant to be donated to the decode step."""

    k: tuple
    v: tuple
    heads_first: bool = struct.field(pytree_node=False, default=False)

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2 if self.heads_first else 1]

    def as_heads_first(self) -> KVCache:
        """The same cache in the ``[B, Hkv, S_max, D]`` layout ``prefix_attention`` reads (a transposing copy)."""
        if self.heads_first:
            return self
        k, v = (tuple(x.swapaxes(1, 2) for x in xs) for xs in (self.k, self.v))
        return KVCache(k=k, v=v, heads_first=True)


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None, *, heads_first: bool = False) -> KVCache:
    """Zero KV cache for ``batch`` sequences of up to ``max_len`` slots."""
    dtype = dtype or cfg.compute_dtype
    hkv, hd = cfg.num_key_value_heads, cfg.head_dim
    shape = (batch, hkv, max_len, hd) if heads_first else (batch, max_len, hkv, hd)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers))
    return KVCache(
        k=zeros, v=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers)), heads_first=heads_first
    )


def _kernel_attention(impl: str, key_mask):
    """The full-sequence attention function for ``ModelConfig.attention_impl`` (None = XLA ``attention``).

    The kernels take the causal + key-padding mask as ``key_mask``; padded query rows (no loss there) get
    zeros instead of the XLA path's harmless average.
    """
    if impl == "xla":
        return None
    from rewardsql_jax.kernels.dispatch import attention_impl

    backend = "reference" if impl == "reference" else None
    kernels = attention_impl(backend, interpret=impl == "pallas_interpret")
    return lambda q, k, v, mask: kernels.flash(q, k, v, causal=True, key_mask=key_mask)


def _causal_attention_fn(key_mask):
    """A layer's ``attn_fn``: causal attention over ``key_mask`` in query chunks (the layer's mask is not read)."""

    def attn_fn(q, k, v, mask):
        return causal_attention_in_query_chunks(q, k, v, key_mask)

    return attn_fn


def uses_pallas_kernels(impl: str) -> bool:
    """Whether ``ModelConfig.attention_impl`` resolves to a Pallas kernel here: ``pallas_interpret``, or ``auto``
    on TPU / GPU. (``auto`` on CPU means the kernels' jnp references, which the sampler's own XLA attention
    paths beat, so the sampler keeps those there.)"""
    return impl == "pallas_interpret" or (impl == "auto" and jax.default_backend() != "cpu")


def _kernel_prefix_decode(impl: str, prefix_k, prefix_v, prefix_mask):
    """The sampler's decode-step attention (one query per row, shared prompt caches) with the Pallas
    flash-decoding kernel (``kernels.prefix_decode``) when ``uses_pallas_kernels(impl)``, else None."""
    if not uses_pallas_kernels(impl):
        return None
    from rewardsql_jax.kernels.dispatch import attention_impl

    kernels = attention_impl(None, interpret=impl == "pallas_interpret")
    return lambda q, k, v, mask: kernels.prefix_decode(
        q, k, v, mask[:, 0], prefix_k=prefix_k, prefix_v=prefix_v, prefix_mask=prefix_mask
    )


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, block: BlockOptions, rngs: nnx.Rngs):
        d, h, hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        lora = cfg.lora.on
        self.q_proj = Linear(d, h * hd, bias=bias, axes=("embed", "q_heads"), cfg=cfg, rngs=rngs, lora=lora("q"))
        self.k_proj = Linear(d, hkv * hd, bias=bias, axes=("embed", "kv_heads"), cfg=cfg, rngs=rngs, lora=lora("k"))
        self.v_proj = Linear(d, hkv * hd, bias=bias, axes=("embed", "kv_heads"), cfg=cfg, rngs=rngs, lora=lora("v"))
        o_bias = block.has_o_proj_bias(cfg)
        self.o_proj = Linear(h * hd, d, bias=o_bias, axes=("q_heads", "embed"), cfg=cfg, rngs=rngs, lora=lora("o"))
        self.cfg = cfg

    def __call__(self, x, cos, sin, mask, kv=None, write_index=None, attn_fn=None, heads_first=False):
        cfg = self.cfg
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, cfg.num_attention_heads, cfg.head_dim)
        k = self.k_proj(x).reshape(b, t, cfg.num_key_value_heads, cfg.head_dim)
        v = self.v_proj(x).reshape(b, t, cfg.num_key_value_heads, cfg.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if kv is not None:
            ck, cv = kv
            if heads_first:  # [B, T, Hkv, D] -> [B, Hkv, T, D], written at slot axis 2
                k, v, start = k.swapaxes(1, 2), v.swapaxes(1, 2), (0, 0, write_index, 0)
            else:
                start = (0, write_index, 0, 0)
            k = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), start)
            v = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), start)
            kv = (k, v)
            if heads_first and attn_fn is None:
                k, v = k.swapaxes(1, 2), v.swapaxes(1, 2)
        out = (attn_fn or attention)(q, k.astype(q.dtype), v.astype(q.dtype), mask)
        return self.o_proj(out.reshape(b, t, -1)), kv


class MLP(nnx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``; the gate / up half differentiated by hand (``swiglu``) unless a bias or
    an adapter joins their pre-activations (plain autodiff then: with adapters the frozen kernels need no gradient)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, f, bias, lora = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, cfg.lora.on
        self.gate_proj = Linear(d, f, bias=bias, axes=("embed", "mlp"), cfg=cfg, rngs=rngs, lora=lora("gate"))
        self.up_proj = Linear(d, f, bias=bias, axes=("embed", "mlp"), cfg=cfg, rngs=rngs, lora=lora("up"))
        self.down_proj = Linear(f, d, bias=bias, axes=("mlp", "embed"), cfg=cfg, rngs=rngs, lora=lora("down"))

    def __call__(self, x):
        cdt = self.gate_proj.compute_dtype
        gate, up = self.gate_proj, self.up_proj
        if gate.bias is not None or gate.lora is not None or up.lora is not None:
            return self.down_proj(jax.nn.silu(gate(x)) * up(x))
        return self.down_proj(swiglu(x.astype(cdt), gate.kernel[...].astype(cdt), up.kernel[...].astype(cdt)))


@jax.custom_vjp
def swiglu(x, w_gate, w_up):
    """``silu(x @ w_gate) * (x @ w_up)`` for x ``[..., D]``, kernels ``[D, F]``, with a hand-written backward pass.

    The value and gradients are those of the plain expression; the backward pass states its four matmuls in the
    form XLA's CPU backend runs without a transposing copy: each weight gradient as ``x^T @ d(pre-activation)``
    with the ``[N, D]`` input as the operand to transpose. Autodiff of the plain expression made XLA transpose the
    ``[N, F]`` pre-activation gradient instead (a strided ``[F, N]`` copy fused into the SiLU backward,
    ``copy_bitcast_fusion`` in the 2026-11-29 and 2026-12-02 profiles of benchmarks/RESULTS.md), once per layer.
    """
    return _swiglu_fwd(x, w_gate, w_up)[0]


def _swiglu_fwd(x, w_gate, w_up):
    g, u = jnp.dot(x, w_gate), jnp.dot(x, w_up)
    return jax.nn.silu(g) * u, (x, w_gate, w_up, g, u)


def _swiglu_bwd(res, dh):
    x, w_gate, w_up, g, u = res
    sig = jax.nn.sigmoid(g)
    du = dh * (g * sig)  # d/du [silu(g) u] = silu(g)
    dg = dh * u * (sig * (1 + g * (1 - sig)))  # silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)))
    last = (((g.ndim - 1,), (1,)), ((), ()))  # contract F with the kernels' F axis
    dx = jax.lax.dot_general(dg, w_gate, last) + jax.lax.dot_general(du, w_up, last)
    rows = (((0,), (0,)), ((), ()))  # sum over every row: x^T @ d
    x2 = x.reshape(-1, x.shape[-1])
    dw_gate = jax.lax.dot_general(x2, dg.reshape(-1, dg.shape[-1]), rows)
    dw_up = jax.lax.dot_general(x2, du.reshape(-1, du.shape[-1]), rows)
    return dx.astype(x.dtype), dw_gate.astype(w_gate.dtype), dw_up.astype(w_up.dtype)


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, block: BlockOptions, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        self.self_attn = Attention(cfg, block, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, cos, sin, mask, kv=None, write_index=None, attn_fn=None, heads_first=False):
        h, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, kv, write_index, attn_fn, heads_first)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class CausalLM(nnx.Module):
    """Decoder-only causal LM. ``model(input_ids, attention_mask=None) -> logits [B, T, V]`` (fp32).

    A architecture's subclass (``llama.py``, ``qwen2.py``) passes its ``BlockOptions``."""

    def __init__(self, cfg: ModelConfig, *, block: BlockOptions, rngs: nnx.Rngs):
        self.config = cfg
        self.embed_tokens = _param(
            rngs, _normal, (cfg.vocab_size, cfg.hidden_size), cfg.weight_dtype, ("vocab", "embed")
        )
        self.layers = nnx.List([DecoderLayer(cfg, block, rngs) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        if not cfg.tie_word_embeddings:
            self.lm_head: Linear | None = Linear(
                cfg.hidden_size, cfg.vocab_size, bias=False, axes=("embed", "vocab"), cfg=cfg, rngs=rngs
            )
        else:
            self.lm_head = None

    def _embed(self, input_ids):
        return jnp.take(self.embed_tokens[...], input_ids, axis=0).astype(self.config.compute_dtype)

    def unembed_matrix(self):
        """``[D, V]`` output projection (the transposed embedding when tied)."""
        if self.lm_head is None:
            return self.embed_tokens[...].T
        return self.lm_head.kernel[...]

    def logits_from_hidden(self, hidden):
        """Project final hidden states to fp32 logits."""
        w = self.unembed_matrix().astype(self.config.compute_dtype)
        return jnp.dot(hidden, w, preferred_element_type=jnp.float32).astype(jnp.float32)

    def hidden_states(self, input_ids, attention_mask=None):
        """Final (normed) hidden states ``[B, T, D]`` for a full sequence (training / scoring)."""
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids, dtype=bool)
        attention_mask = jnp.asarray(attention_mask).astype(bool)
        positions = jnp.maximum(jnp.cumsum(attention_mask, axis=-1) - 1, 0)
        t = input_ids.shape[1]
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        mask = causal[None] & attention_mask[:, None, :]
        cos, sin = rope_tables(positions, self.config.head_dim, self.config.rope_theta)
        attn_fn = _kernel_attention(self.config.attention_impl, attention_mask) or _causal_attention_fn(attention_mask)

        def run(layer, x):
            return layer(x, cos, sin, mask, attn_fn=attn_fn)[0]

        x = self._embed(input_ids)
        if self.config.scan_layers:
            x, _ = self._scan_layers(lambda layer, x, _: (run(layer, x), None), x)
            return self.norm(x)
        if self.config.remat:
            run = nnx.remat(run)
        for layer in self.layers:
            x = run(layer, x)
        return self.norm(x)

    def _scan_layers(self, body, x, per_layer=None):
        """``body(layer, x, per_layer[i]) -> (x, out)`` over the layers as one ``lax.scan`` (``config.scan_layers``):
        the layers' variables stacked along a new leading axis (a copy of the layer weights per call), so XLA
        compiles one layer instead of ``num_hidden_layers``; with ``config.remat`` each layer is recomputed in the
        backward pass. ``per_layer``: a pytree of ``[L, ...]`` arrays, row i given to layer i. Returns ``(x, outs)``,
        the outputs stacked ``[L, ...]``."""
        graphdef, _ = nnx.split(self.layers[0])
        stacked = _stacked(nnx.state(layer) for layer in self.layers)

        def step(x, inputs):
            state, extra = inputs
            return body(nnx.merge(graphdef, state), x, extra)

        if self.config.remat:
            step = jax.checkpoint(step)
        return jax.lax.scan(step, x, (stacked, per_layer))

    def __call__(self, input_ids, attention_mask=None):
        return self.logits_from_hidden(self.hidden_states(input_ids, attention_mask))

    def forward_with_cache(self, input_ids, positions, cache: KVCache, *, write_index, key_mask, prefix=None):
        """One prefill or decode chunk against a KV cache.

        ``input_ids``/``positions`` ``[B, T]``; the chunk is written at cache slots
        ``[write_index, write_index + T)``; ``key_mask [B, S_max]`` marks valid slots (including the
        ones written now). Query ``i`` sees slot ``s`` iff ``s <= write_index + i`` and ``key_mask``.
        ``prefix=(prompt KVCache [P, W], prompt mask [P, W])``: the rows (``B = P * G``, prompt-major)
        also attend to their prompt's cache, stored once per prompt (``prefix_attention``); a third entry, a
        heads-first KVCache of one row, is what comes before every prompt (read once for the batch).
        Returns ``(logits [B, T, V] fp32, new cache)``.
        """
        hidden, cache = self.hidden_with_cache(
            input_ids, positions, cache, write_index=write_index, key_mask=key_mask, prefix=prefix
        )
        return self.logits_from_hidden(hidden), cache

    def hidden_with_cache(self, input_ids, positions, cache: KVCache, *, write_index, key_mask, prefix=None):
        """As ``forward_with_cache`` but returns final (normed) hidden states ``[B, T, D]``.

        Lets a sampler project only the positions it needs (XLA does not push a slice through the
        vocab matmul, so a prefill would otherwise pay for ``[B, T, V]`` logits).
        """
        t = input_ids.shape[1]
        slots = jnp.arange(cache.max_len)
        query_slots = write_index + jnp.arange(t)
        mask = (slots[None, :] <= query_slots[:, None])[None] & key_mask[:, None, :].astype(bool)
        cos, sin = rope_tables(positions, self.config.head_dim, self.config.rope_theta)
        x = self._embed(input_ids)
        whole_chunk = isinstance(write_index, int) and write_index == 0 and t == cache.max_len
        fresh_prefill = prefix is None and whole_chunk and not cache.heads_first

        def attn_fn_of(prefix_kv):
            if prefix_kv is not None:
                pk, pv, *common_kv = prefix_kv
                common = dict(zip(("common_k", "common_v"), common_kv))
                pmask = prefix[1]
                return (
                    t == 1 and not common and _kernel_prefix_decode(self.config.attention_impl, pk, pv, pmask)
                ) or functools.partial(prefix_attention, prefix_k=pk, prefix_v=pv, prefix_mask=pmask, **common)
            if fresh_prefill and uses_pallas_kernels(self.config.attention_impl):  # causal flash attention kernel
                return _kernel_attention(self.config.attention_impl, key_mask)
            if fresh_prefill:  # the whole cache is this chunk: causal attention, upper triangle skipped
                return _causal_attention_fn(key_mask)
            return None

        def prefix_of(i):
            if prefix is None:
                return None
            common = (prefix[2].k[i], prefix[2].v[i]) if len(prefix) > 2 else ()
            return (prefix[0].k[i], prefix[0].v[i], *common)

        if self.config.scan_layers and whole_chunk:
            # the chunk fills the whole cache, so the cache's old contents are never read: each layer writes into
            # zeros of its shape, and the prefix caches (read-only) are stacked as the scan's per-layer inputs
            zeros = jnp.zeros(cache.k[0].shape, cache.k[0].dtype)

            def body(layer, x, prefix_kv):
                return self._layer_with_cache(
                    layer, x, cos, sin, mask, (zeros, zeros), write_index, attn_fn_of(prefix_kv), cache, remat=False
                )

            stacked = None if prefix is None else _stacked(map(prefix_of, range(len(self.layers))))
            x, (ks, vs) = self._scan_layers(body, x, stacked)
            return self.norm(x), KVCache(k=tuple(ks), v=tuple(vs), heads_first=cache.heads_first)
        new_k, new_v = [], []
        for i, (layer, ck, cv) in enumerate(zip(self.layers, cache.k, cache.v)):
            attn_fn = attn_fn_of(prefix_of(i))
            x, (k, v) = self._layer_with_cache(layer, x, cos, sin, mask, (ck, cv), write_index, attn_fn, cache)
            new_k.append(k)
            new_v.append(v)
        return self.norm(x), KVCache(k=tuple(new_k), v=tuple(new_v), heads_first=cache.heads_first)

    def _layer_with_cache(self, layer, x, cos, sin, mask, kv, write_index, attn_fn, cache, remat=True):
        """One layer of ``hidden_with_cache``; with ``config.remat`` recomputed in the backward pass, as in
        ``hidden_states`` (the prefix-shared SFT / PRM / RL steps run their layers through here; ``remat=False``:
        the caller recomputes, as ``_scan_layers`` does)."""

        def run(layer, x, kv):
            return layer(x, cos, sin, mask, kv, write_index, attn_fn, cache.heads_first)

        if self.config.remat and remat:
            run = nnx.remat(run)
        return run(layer, x, kv)


def _stacked(trees):
    """Pytrees of the same structure, one per layer, as one pytree of ``[L, ...]`` arrays (a scan's per-layer input)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def count_params(model: nnx.Module) -> int:
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
