"""Per-token log-probs of the tokens of a sequence under a causal LM, in fp32, with sampling temperature."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def target_logprobs(logits, targets, *, temperature: float = 1.0):
    """log softmax(logits / temperature)[target] per position, in fp32.

    Computed as ``logit[target] - logsumexp(logits)`` so no second [.., V] array (the full log-softmax) is
    materialised. logits ``[..., V]``, targets ``[...]`` int -> ``[...]`` fp32.
    """
    logits = jnp.asarray(logits).astype(jnp.float32)
    if temperature != 1.0:
        logits = logits / temperature
    picked = jnp.take_along_axis(logits, jnp.asarray(targets)[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def sequence_logprobs(model, input_ids, attention_mask=None, *, temperature: float = 1.0,
                      chunk_size: int | None = None):
    """Token-aligned log-probs ``[B, T]``: entry t is log p(input_ids[t] | input_ids[<t]); entry 0 is 0.

    ``temperature`` must equal the sampler's so ratios against its log-probs are unbiased (DESIGN.md).
    ``chunk_size`` projects the hidden states to the vocabulary ``chunk_size`` positions at a time under
    ``jax.checkpoint``, so the [B, T, V] fp32 logits (1.2 GB at B=8, T=256, V=152k) never exist at once,
    in the forward or the backward pass.
    """
    hidden = model.hidden_states(input_ids, attention_mask)[:, :-1]
    targets = jnp.asarray(input_ids)[:, 1:]
    if chunk_size is None or chunk_size >= hidden.shape[1]:
        lp = target_logprobs(model.logits_from_hidden(hidden), targets, temperature=temperature)
    else:
        lp = _chunked(model, hidden, targets, temperature, chunk_size)
    return jnp.pad(lp, ((0, 0), (1, 0)))


def sequence_logprobs_and_entropy(model, input_ids, attention_mask=None, *, temperature: float = 1.0):
    """``(logprobs [B, T], entropies [B, T])``, token-aligned like ``sequence_logprobs``.

    Entry t of the entropies is H(softmax(logits_{t-1} / temperature)), the entropy of the distribution
    token t was drawn from (verl ``entropy_from_logits``); entry 0 is 0. Materialises [B, T, V] logits.
    """
    hidden = model.hidden_states(input_ids, attention_mask)[:, :-1]
    logits = model.logits_from_hidden(hidden).astype(jnp.float32) / temperature
    log_p = jax.nn.log_softmax(logits, axis=-1)
    targets = jnp.asarray(input_ids)[:, 1:, None].astype(jnp.int32)
    lp = jnp.take_along_axis(log_p, targets, axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
    pad = ((0, 0), (1, 0))
    return jnp.pad(lp, pad), jnp.pad(entropy, pad)


def _chunked(model, hidden, targets, temperature, chunk_size):
    b, t, d = hidden.shape
    n = -(-t // chunk_size)
    pad = n * chunk_size - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, d).swapaxes(0, 1)
    targets = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size).swapaxes(0, 1)

    @jax.checkpoint
    def one(h, y):
        return target_logprobs(model.logits_from_hidden(h), y, temperature=temperature)

    # A Python loop rather than lax.map: `model` is an NNX module captured by closure.
    out = jnp.stack([one(hidden[i], targets[i]) for i in range(n)], axis=1)
    return out.reshape(b, n * chunk_size)[:, :t]


def summed_logprobs(model, input_ids, attention_mask, loss_mask, *, temperature: float = 1.0,
                    chunk_size: int | None = None):
    """Sum over ``loss_mask`` tokens of the token log-probs -> ``[B]`` (DPO's completion log-likelihood)."""
    lp = sequence_logprobs(model, input_ids, attention_mask, temperature=temperature, chunk_size=chunk_size)
    return jnp.sum(lp * jnp.asarray(loss_mask, jnp.float32), axis=-1)
