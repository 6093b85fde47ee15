"""Decoder-only transformer shared by the Qwen2 and Llama families (Flax NNX).

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

from .config import ModelConfig


def _param(rngs: nnx.Rngs, init, shape, dtype, logical_axes) -> nnx.Param:
    return nnx.Param(init(rngs.params(), shape, dtype), logical_axes=logical_axes)


_normal = jax.nn.initializers.normal(stddev=0.02)


class Linear(nnx.Module):
    """``y = x @ kernel (+ bias)``; kernel stored ``[in, out]`` (HF stores ``[out, in]``)."""

    def __init__(self, d_in, d_out, *, bias, axes, cfg: ModelConfig, rngs: nnx.Rngs):
        self.kernel = _param(rngs, _normal, (d_in, d_out), cfg.weight_dtype, axes)
        self.bias = _param(rngs, jax.nn.initializers.zeros, (d_out,), cfg.weight_dtype, axes[1:]) if bias else None
        self.compute_dtype = cfg.compute_dtype

    def __call__(self, x):
        y = jnp.dot(x.astype(self.compute_dtype), self.kernel[...].astype(self.compute_dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.compute_dtype)
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


def rope_tables(positions, head_dim: int, theta: float):
    """cos/sin ``[B, T, head_dim]`` for integer positions ``[B, T]`` (RoFormer Eq. 34, HF layout)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x, cos, sin):
    """Rotate ``x [B, T, H, D]`` by the tables of ``rope_tables`` (computed in fp32)."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)


def attention(q, k, v, mask):
    """Scaled dot-product attention with grouped KV heads.

    q ``[B, T, H, D]``, k/v ``[B, S, Hkv, D]``, mask ``[B, T, S]`` (True = attend). Softmax in fp32.
    Rows with no visible key (padding queries) return a harmless average instead of NaN.
    """
    b, t, h, d = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, t, hkv, h // hkv, d)
    if t == 1:
        return _single_query_attention(q, k, v, mask).reshape(b, t, h, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(d).astype(jnp.float32)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, d)


def _single_query_attention(q, k, v, mask):
    """One query per row (a decode step) as multiply-and-reduce over the cache in its stored ``[B, S, Hkv, D]``
    layout: a dot_general here makes XLA transpose (copy) the whole cache of every layer at every step.
    q ``[B, 1, Hkv, G, D]``, mask ``[B, 1, S]`` -> ``[B, 1, Hkv, G, D]``."""
    d = q.shape[-1]
    scale = 1.0 / jnp.sqrt(jnp.float32(d))
    scores = jnp.sum(q[:, 0, None].astype(jnp.float32) * k[:, :, :, None, :].astype(jnp.float32), axis=-1) * scale
    scores = jnp.where(mask[:, 0, :, None, None], scores, jnp.finfo(jnp.float32).min)  # [B, S, Hkv, G]
    probs = jax.nn.softmax(scores, axis=1)
    out = jnp.sum(probs[..., None] * v[:, :, :, None, :].astype(jnp.float32), axis=1)  # [B, Hkv, G, D]
    return out[:, None].astype(v.dtype)


def prefix_attention(q, k, v, mask, *, prefix_k, prefix_v, prefix_mask):
    """Attention of rows that share prompts, the prompts' keys/values stored once (shared-prefix decoding).

    Rows are prompt-major: ``B = P * G`` rows, G per prompt. q ``[B, T, H, D]``; k/v ``[B, S, Hkv, D]`` and
    mask ``[B, T, S]`` are each row's own (generated) slots; prefix_k/prefix_v ``[P, Hkv, W, D]`` (heads
    before slots: the batched matmuls then read them in place) and prefix_mask ``[P, W]`` are the prompts,
    which every query sees in full. One softmax over W + S keys: the same result as ``attention`` over each
    row's ``prompt + own`` cache, while a prompt's cache is read once per prompt instead of once per row.
    (The own slots stay ``[B, S, Hkv, D]``: XLA transposes that small cache for its matmuls, which on CPU is
    cheaper than a multiply-and-reduce over it.)
    """
    b, t, h, d = q.shape
    p, hkv, w, _ = prefix_k.shape
    g, groups = b // p, h // hkv
    scale = 1.0 / jnp.sqrt(jnp.float32(d))
    # [P, Hkv, G * T * groups, D]: every query of a prompt's rows against that prompt's keys in one matmul
    qp = q.reshape(p, g, t, hkv, groups, d).transpose(0, 3, 1, 2, 4, 5).reshape(p, hkv, g * t * groups, d)
    s_prefix = jnp.einsum("pkqd,pkwd->pkqw", qp, prefix_k.astype(q.dtype), preferred_element_type=jnp.float32) * scale
    s_prefix = jnp.where(prefix_mask[:, None, None, :].astype(bool), s_prefix, jnp.finfo(jnp.float32).min)
    s_prefix = s_prefix.reshape(p, hkv, g, t, groups, w).transpose(0, 2, 3, 5, 1, 4).reshape(b, t, w, hkv, groups)
    # own slots: the generated tokens
    q5 = q.astype(jnp.float32).reshape(b, t, hkv, groups, d)
    s_own = jnp.einsum("btkgd,bskd->btskg", q5, k.astype(jnp.float32)) * scale
    s_own = jnp.where(mask[:, :, :, None, None], s_own, jnp.finfo(jnp.float32).min)  # [B, T, S, Hkv, groups]
    probs = jax.nn.softmax(jnp.concatenate([s_prefix, s_own], axis=2), axis=2)
    p_prefix, p_own = probs[:, :, :w], probs[:, :, w:]
    p_prefix = p_prefix.reshape(p, g, t, w, hkv, groups).transpose(0, 4, 1, 2, 5, 3).reshape(p, hkv, g * t * groups, w)
    out = jnp.einsum("pkqw,pkwd->pkqd", p_prefix, prefix_v.astype(jnp.float32))
    out = out.reshape(p, hkv, g, t, groups, d).transpose(0, 2, 3, 1, 4, 5).reshape(b, t, hkv, groups, d)
    out = out + jnp.einsum("btskg,bskd->btkgd", p_own, v.astype(jnp.float32))
    return out.reshape(b, t, h, d).astype(v.dtype)


@struct.dataclass
class KVCache:
    """Per-layer key/value buffers ``[B, S_max, Hkv, D]``; a pytree meant to be donated to the decode step."""

    k: tuple
    v: tuple

    @property
    def max_len(self) -> int:
        return self.k[0].shape[1]


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """Zero KV cache for ``batch`` sequences of up to ``max_len`` slots."""
    dtype = dtype or cfg.compute_dtype
    shape = (batch, max_len, cfg.num_key_value_heads, cfg.head_dim)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers))
    return KVCache(k=zeros, v=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers)))


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


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, h, hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = Linear(d, h * hd, bias=bias, axes=("embed", "q_heads"), cfg=cfg, rngs=rngs)
        self.k_proj = Linear(d, hkv * hd, bias=bias, axes=("embed", "kv_heads"), cfg=cfg, rngs=rngs)
        self.v_proj = Linear(d, hkv * hd, bias=bias, axes=("embed", "kv_heads"), cfg=cfg, rngs=rngs)
        # HF Llama biases o_proj too when attention_bias; Qwen2 never does.
        o_bias = bias and cfg.model_type == "llama"
        self.o_proj = Linear(h * hd, d, bias=o_bias, axes=("q_heads", "embed"), cfg=cfg, rngs=rngs)
        self.cfg = cfg

    def __call__(self, x, cos, sin, mask, kv=None, write_index=None, attn_fn=None):
        cfg = self.cfg
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, cfg.num_attention_heads, cfg.head_dim)
        k = self.k_proj(x).reshape(b, t, cfg.num_key_value_heads, cfg.head_dim)
        v = self.v_proj(x).reshape(b, t, cfg.num_key_value_heads, cfg.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if kv is not None:
            ck, cv = kv
            k = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (0, write_index, 0, 0))
            v = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (0, write_index, 0, 0))
            kv = (k, v)
        out = (attn_fn or attention)(q, k.astype(q.dtype), v.astype(q.dtype), mask)
        return self.o_proj(out.reshape(b, t, -1)), kv


class MLP(nnx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, f, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = Linear(d, f, bias=bias, axes=("embed", "mlp"), cfg=cfg, rngs=rngs)
        self.up_proj = Linear(d, f, bias=bias, axes=("embed", "mlp"), cfg=cfg, rngs=rngs)
        self.down_proj = Linear(f, d, bias=bias, axes=("mlp", "embed"), cfg=cfg, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        self.self_attn = Attention(cfg, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, cos, sin, mask, kv=None, write_index=None, attn_fn=None):
        h, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, kv, write_index, attn_fn)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class CausalLM(nnx.Module):
    """Decoder-only causal LM. ``model(input_ids, attention_mask=None) -> logits [B, T, V]`` (fp32)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.embed_tokens = _param(rngs, _normal, (cfg.vocab_size, cfg.hidden_size), cfg.weight_dtype, ("vocab", "embed"))
        self.layers = nnx.List([DecoderLayer(cfg, rngs) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg, rngs=rngs)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False, axes=("embed", "vocab"), cfg=cfg, rngs=rngs)
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
        attn_fn = _kernel_attention(self.config.attention_impl, attention_mask)

        def run(layer, x):
            return layer(x, cos, sin, mask, attn_fn=attn_fn)[0]

        if self.config.remat:
            run = nnx.remat(run)
        x = self._embed(input_ids)
        for layer in self.layers:
            x = run(layer, x)
        return self.norm(x)

    def __call__(self, input_ids, attention_mask=None):
        return self.logits_from_hidden(self.hidden_states(input_ids, attention_mask))

    def forward_with_cache(self, input_ids, positions, cache: KVCache, *, write_index, key_mask, prefix=None):
        """One prefill or decode chunk against a KV cache.

        ``input_ids``/``positions`` ``[B, T]``; the chunk is written at cache slots
        ``[write_index, write_index + T)``; ``key_mask [B, S_max]`` marks valid slots (including the
        ones written now). Query ``i`` sees slot ``s`` iff ``s <= write_index + i`` and ``key_mask``.
        ``prefix=(prompt KVCache [P, W], prompt mask [P, W])``: the rows (``B = P * G``, prompt-major)
        also attend to their prompt's cache, stored once per prompt (``prefix_attention``).
        Returns ``(logits [B, T, V] fp32, new cache)``.
        """
        hidden, cache = self.hidden_with_cache(input_ids, positions, cache, write_index=write_index, key_mask=key_mask,
                                               prefix=prefix)
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
        new_k, new_v = [], []
        for i, (layer, ck, cv) in enumerate(zip(self.layers, cache.k, cache.v)):
            attn_fn = None if prefix is None else functools.partial(
                prefix_attention, prefix_k=prefix[0].k[i], prefix_v=prefix[0].v[i], prefix_mask=prefix[1])
            x, (k, v) = layer(x, cos, sin, mask, (ck, cv), write_index, attn_fn)
            new_k.append(k)
            new_v.append(v)
        return self.norm(x), KVCache(k=tuple(new_k), v=tuple(new_v))


def count_params(model: nnx.Module) -> int:
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
