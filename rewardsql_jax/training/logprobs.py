"""Per-token log-probs of the tokens of a sequence under a causal LM, in fp32, with sampling temperature."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rewardsql_jax.models.shared_prefix import shared_prefix_hidden

from .vocab_head import head_logprobs, supports_fused_head


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


def sequence_logprobs(
    model, input_ids, attention_mask=None, *, temperature: float = 1.0, chunk_size: int | None = None
):
    """Token-aligned log-probs ``[B, T]``: entry t is log p(input_ids[t] | input_ids[<t]); entry 0 is 0.

    ``temperature`` must equal the sampler's so ratios against its log-probs are unbiased (DESIGN.md).
    ``chunk_size`` projects the hidden states to the vocabulary ``chunk_size`` positions at a time under
    ``jax.checkpoint``, so the [B, T, V] fp32 logits (1.2 GB at B=8, T=256, V=152k) never exist at once,
    in the forward or the backward pass.
    """
    hidden = model.hidden_states(input_ids, attention_mask)[:, :-1]
    lp = hidden_logprobs(model, hidden, jnp.asarray(input_ids)[:, 1:], temperature, chunk_size)
    return jnp.pad(lp, ((0, 0), (1, 0)))


def hidden_logprobs(model, hidden, targets, temperature, chunk_size):
    """log p(targets) from hidden states ``[B, T, D]`` (vocab projection chunked when asked)."""
    if chunk_size is None or chunk_size >= hidden.shape[1]:
        return _project_and_pick(model, hidden, targets, temperature)
    return _chunked(model, hidden, targets, temperature, chunk_size)


def _project_and_pick(model, hidden, targets, temperature):
    """``target_logprobs`` of the projected hidden states; the fused op (``vocab_head``) for this package's LM."""
    if supports_fused_head(model):
        return head_logprobs(model, hidden, targets, temperature=temperature)
    return target_logprobs(model.logits_from_hidden(hidden), targets, temperature=temperature)


def sequence_logprobs_and_entropy(model, input_ids, attention_mask=None, *, temperature: float = 1.0):
    """``(logprobs [B, T], entropies [B, T])``, token-aligned like ``sequence_logprobs``.

    Entry t of the entropies is H(softmax(logits_{t-1} / temperature)), the entropy of the distribution
    token t was drawn from (verl ``entropy_from_logits``); entry 0 is 0. Materialises [B, T, V] logits.
    """
    hidden = model.hidden_states(input_ids, attention_mask)[:, :-1]
    lp, entropy = _hidden_logprobs_and_entropy(model, hidden, jnp.asarray(input_ids)[:, 1:], temperature)
    pad = ((0, 0), (1, 0))
    return jnp.pad(lp, pad), jnp.pad(entropy, pad)


def _hidden_logprobs_and_entropy(model, hidden, targets, temperature):
    logits = model.logits_from_hidden(hidden).astype(jnp.float32) / temperature
    log_p = jax.nn.log_softmax(logits, axis=-1)
    lp = jnp.take_along_axis(log_p, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return lp, -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def shared_prefix_logprobs(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    with_entropy: bool = False,
):
    """Completion-aligned log-probs ``[P, G, Lc]`` (entry t: log p(completion[t] | prompt, completion[:t]))
    of G completions per prompt, each prompt computed once (``models.shared_prefix``); with
    ``with_entropy`` also the entropies of the distributions the tokens were drawn from (as
    ``sequence_logprobs_and_entropy``). Same values as ``sequence_logprobs`` on the unshared rows."""
    hidden = shared_prefix_hidden(model, prompt_ids, prompt_mask, completion_ids)
    p, g, lc, d = hidden.shape
    hidden, targets = hidden.reshape(p * g, lc, d), jnp.asarray(completion_ids).reshape(p * g, lc)
    if with_entropy:
        lp, entropy = _hidden_logprobs_and_entropy(model, hidden, targets, temperature)
        return lp.reshape(p, g, lc), entropy.reshape(p, g, lc)
    return hidden_logprobs(model, hidden, targets, temperature, chunk_size).reshape(p, g, lc)


def _chunked(model, hidden, targets, temperature, chunk_size):
    b, t, d = hidden.shape
    n = -(-t // chunk_size)
    pad = n * chunk_size - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, d).swapaxes(0, 1)
    targets = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size).swapaxes(0, 1)

    @jax.checkpoint
    def one(h, y):
        return _project_and_pick(model, h, y, temperature)

    # A Python loop rather than lax.map: `model` is an NNX module captured by closure.
    out = jnp.stack([one(hidden[i], targets[i]) for i in range(n)], axis=1)
    return out.reshape(b, n * chunk_size)[:, :t]


def summed_logprobs(
    model, input_ids, attention_mask, loss_mask, *, temperature: float = 1.0, chunk_size: int | None = None
):
    """Sum over ``loss_mask`` tokens of the token log-probs -> ``[B]`` (DPO's completion log-likelihood)."""
    lp = sequence_logprobs(model, input_ids, attention_mask, temperature=temperature, chunk_size=chunk_size)
    return jnp.sum(lp * jnp.asarray(loss_mask, jnp.float32), axis=-1)
