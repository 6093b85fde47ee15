"""Pure logits transforms for sampling: temperature, top-k, top-p (nucleus), and token draws.

All functions take ``[B, V]`` fp32 logits. Filtered-out entries are set to ``-inf`` so that
``jax.random.categorical`` never draws them. The order follows HF ``generate``: temperature, then
top-k, then top-p (top-p renormalises over what top-k kept).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..ops import first_argmax

NEG_INF = -jnp.inf


def top_k_filter(logits, k: int):
    """Keep the ``k`` largest logits per row (and anything tied with the k-th), ``-inf`` elsewhere.

    ``k`` is a static int; ``k <= 0`` or ``k >= V`` returns ``logits`` unchanged (HF semantics).
    """
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits < kth, NEG_INF, logits)


def _nucleus_keep_sorted(sorted_logits, top_p):
    """Mask over descending-sorted logits: keep token i iff the mass strictly before it is < top_p."""
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    return mass_before < top_p


def top_p_filter(logits, top_p):
    """Nucleus filter (HF ``TopPLogitsWarper``): keep the smallest top set whose probability mass
    reaches ``top_p``; the most likely token is always kept. ``top_p`` may be a traced scalar in (0, 1].

    Tokens tied with the smallest kept logit are kept too (HF breaks such ties by sort order).
    """
    sorted_logits = -jnp.sort(-logits, axis=-1)
    keep = _nucleus_keep_sorted(sorted_logits, top_p)
    cutoff = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < cutoff, NEG_INF, logits)


def filter_logits(logits, *, top_k: int, top_p, use_top_p: bool):
    """Top-k then top-p on already temperature-scaled logits.

    With ``top_k > 0`` the nucleus is computed on the k survivors only (a sort of k values, not of
    the whole vocabulary), which gives the same set as ``top_p_filter(top_k_filter(x))``.
    """
    v = logits.shape[-1]
    if not use_top_p:
        return top_k_filter(logits, top_k)
    if top_k <= 0 or top_k >= v:
        return top_p_filter(logits, top_p)
    vals = jax.lax.top_k(logits, top_k)[0]  # descending
    keep = _nucleus_keep_sorted(vals, top_p)
    cutoff = jnp.min(jnp.where(keep, vals, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < cutoff, NEG_INF, logits)


def token_logprobs(logits, tokens, temperature):
    """``log_softmax(logits / T)[tokens]`` (T = 1 when ``temperature`` is 0, i.e. greedy). ``[B]``."""
    t = jnp.where(temperature > 0, temperature, 1.0)
    logp = jax.nn.log_softmax(logits / t, axis=-1)
    return jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]


def sample_tokens(key, logits, *, temperature, greedy: bool, top_k: int = 0, top_p=1.0, use_top_p: bool = False):
    """Draw one token per row and return ``(tokens [B] int32, logprobs [B])``.

    ``greedy`` (static) takes the argmax and scores it with ``log_softmax(logits)``. Otherwise tokens
    come from ``categorical(filter(logits / T))`` and are scored with the temperature-scaled,
    *unfiltered* distribution ``log_softmax(logits / T)`` (DESIGN.md: same temperature as the sampler;
    the filter only restricts which tokens may be drawn).
    """
    if greedy:
        tokens = first_argmax(logits).astype(jnp.int32)
        return tokens, token_logprobs(logits, tokens, 0.0)
    scaled = logits / temperature
    filtered = filter_logits(scaled, top_k=top_k, top_p=top_p, use_top_p=use_top_p)
    # jax.random.categorical's own draw: argmax(logits + Gumbel noise), with the cheaper argmax
    tokens = first_argmax(filtered + jax.random.gumbel(key, filtered.shape, jnp.float32)).astype(jnp.int32)
    logp = jax.nn.log_softmax(scaled, axis=-1)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]
