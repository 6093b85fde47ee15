"""The vocabulary projection, log-softmax and target pick as one op with a hand-written backward pass.

``head_logprobs(model, hidden, targets)`` equals ``target_logprobs(model.logits_from_hidden(hidden), targets)``
(and, with ``with_hit``, ``ops.first_argmax(logits) == targets``, the SFT token accuracy) but differentiates in one
pass over the ``[N, V]`` logits instead of autodiff's several: the forward keeps ``exp(logits - max)`` and its
row sums, the backward forms ``d logits = g * (onehot(target) - softmax) / temperature`` once and feeds it to the
two weight / input matmuls. XLA's autodiff of the same function materialises the log-softmax gradient twice
(once transposed, for the weight-gradient matmul) and reads the logits for the max, the sum, the pick and the
argmax separately (2026-12-02 profile in benchmarks/RESULTS.md). The weight gradient is computed as
``hidden^T @ d logits`` (``[D, V]``, both operands in the layout the CPU matmul reads in place) and transposed
for a tied ``[V, D]`` embedding.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rewardsql_jax.models.transformer import CausalLM


def supports_fused_head(model) -> bool:
    """Whether ``head_logprobs`` applies (this package's causal LM; other modules keep ``logits_from_hidden``)."""
    return isinstance(model, CausalLM)


def head_logprobs(model: CausalLM, hidden, targets, *, temperature: float = 1.0, with_hit: bool = False):
    """log softmax(hidden @ W / temperature)[target] ``[...]`` fp32 for hidden ``[..., D]``, targets ``[...]``.

    With ``with_hit`` returns ``(logprobs, hit)``, ``hit`` = ``first_argmax(logits) == target`` as fp32 (no
    gradient). The same values as ``target_logprobs(model.logits_from_hidden(hidden), targets, temperature=...)``
    up to fp32 rounding; the gradient w.r.t. ``hidden`` and the output weights is that of the same function.
    """
    cdt = model.config.compute_dtype
    tied = model.lm_head is None
    w = (model.embed_tokens[...] if model.lm_head is None else model.lm_head.kernel[...]).astype(
        cdt
    )  # [V, D] tied, else [D, V]
    lead = hidden.shape[:-1]
    h = hidden.astype(cdt).reshape(-1, hidden.shape[-1])
    y = jnp.asarray(targets).astype(jnp.int32).reshape(-1)
    lp, hit = _fused(h, w, y, tied, float(temperature))
    lp, hit = lp.reshape(lead), hit.reshape(lead)
    return (lp, hit) if with_hit else lp


def _logits(h, w, tied):
    dims = (((1,), (1,)), ((), ())) if tied else (((1,), (0,)), ((), ()))
    return jax.lax.dot_general(h, w, dims, preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _fused(h, w, y, tied, temperature):
    return _forward(h, w, y, tied, temperature)[0]


def _forward(h, w, y, tied, temperature):
    logits = _logits(h, w, tied)
    if temperature != 1.0:
        logits = logits / temperature
    m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits - m)
    s = jnp.sum(e, axis=-1, keepdims=True)
    picked = jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
    lp = picked - (m + jnp.log(s))[:, 0]
    hit = _first_argmax_is(logits, m[:, 0], picked, y)
    return (lp, hit), (h, w, y, e, s)


def _first_argmax_is(logits, m, picked, y):
    """``first_argmax(logits) == y`` per row, as one fused count (no ``[N, V]`` index array): the target holds
    the maximum and no earlier position does. A row without a maximum (NaN) has first_argmax V - 1, as in
    ``ops.first_argmax``."""
    v = logits.shape[-1]
    earlier = jnp.arange(v, dtype=jnp.int32)[None, :] < y[:, None]
    ties_before = jnp.sum((earlier & (logits == m[:, None])).astype(jnp.int32), axis=-1)
    hit = (picked == m) & (ties_before == 0)
    return jnp.where(jnp.isnan(m), y == v - 1, hit).astype(jnp.float32)


def _fused_fwd(h, w, y, tied, temperature):
    return _forward(h, w, y, tied, temperature)


def _fused_bwd(tied, temperature, res, cts):
    h, w, y, e, s = res
    g = cts[0].astype(jnp.float32)  # the hit output carries no gradient
    onehot = jnp.arange(e.shape[-1], dtype=jnp.int32)[None, :] == y[:, None]
    dlogits = jnp.where(onehot, g[:, None], 0.0) - e * (g[:, None] / s)
    if temperature != 1.0:
        dlogits = dlogits / temperature
    dl = dlogits.astype(w.dtype)
    # d hidden [N, D]: d logits [N, V] against W's vocabulary axis
    dh_dims = (((1,), (0,)), ((), ())) if tied else (((1,), (1,)), ((), ()))
    dh = jax.lax.dot_general(dl, w, dh_dims, preferred_element_type=jnp.float32).astype(h.dtype)
    # d W as [D, V] = hidden^T @ d logits (the [N, D] hidden is the operand to transpose, not the [N, V] logits)
    dw = jax.lax.dot_general(h, dl, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    dw = (dw.T if tied else dw).astype(w.dtype)
    return dh, dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)
