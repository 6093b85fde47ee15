"""Forward pass of G completions that share one prompt, with the prompt computed once (GRPO groups).

A GRPO batch holds ``P`` prompts with ``G`` sampled completions each. Run as ``P * G`` independent
``prompt + completion`` rows, every prompt token goes through the model G times although its activations
are identical in all G rows (causal attention: a prompt token never sees the completion). Here the
prompt runs once per group through ``hidden_with_cache``; its per-layer keys/values are broadcast to the
G completions, which then run as one chunk against that cache. The hidden states -- and therefore the
loss and, by the chain rule through the broadcast (a sum over G), the gradients -- equal the unshared
ones up to fp32 summation order, while the prompt's share of the FLOPs drops by G. With Reward-SQL's
shapes (prompt up to 8192 tokens, 512 generated, G = 8) that is most of the step.
"""
from __future__ import annotations

import jax.numpy as jnp

from .transformer import KVCache, init_cache


def _broadcast_to_group(x, group: int, extra_slots: int):
    """[P, S, ...] -> [P * G, S + extra_slots, ...]: each prompt's rows repeated G times (prompt-major),
    then ``extra_slots`` empty cache slots for the completion."""
    x = jnp.repeat(x, group, axis=0)
    return jnp.pad(x, ((0, 0), (0, extra_slots)) + ((0, 0),) * (x.ndim - 2))


def shared_prefix_hidden(model, prompt_ids, prompt_mask, completion_ids):
    """Final hidden states that predict each completion token, computing every prompt once.

    ``prompt_ids``/``prompt_mask`` ``[P, Lp]`` LEFT-padded (the last slot of every prompt is a real token);
    ``completion_ids`` ``[P, G, Lc]`` right-padded, completion k of prompt p in ``[p, k]``. Returns
    ``[P, G, Lc, D]`` where entry t is the state after ``prompt + completion[:t]``, i.e. the one whose
    logits give ``p(completion[t] | ...)``. Positions follow ``CausalLM.hidden_states`` (padding skipped).
    """
    prompt_ids, completion_ids = jnp.asarray(prompt_ids), jnp.asarray(completion_ids)
    if prompt_ids.ndim != 2 or completion_ids.ndim != 3 or completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(f"prompt_ids must be [P, Lp] and completion_ids [P, G, Lc] with the same P, got "
                         f"{prompt_ids.shape} and {completion_ids.shape}")
    p, lp = prompt_ids.shape
    _, g, lc = completion_ids.shape
    prompt_mask = jnp.asarray(prompt_mask).astype(bool)
    cfg = model.config
    cache = init_cache(cfg, p, lp)
    positions = jnp.maximum(jnp.cumsum(prompt_mask, axis=-1) - 1, 0)
    prompt_hidden, cache = model.hidden_with_cache(prompt_ids, positions, cache, write_index=0, key_mask=prompt_mask)
    first = jnp.repeat(prompt_hidden[:, -1], g, axis=0)[:, None]  # predicts completion token 0
    if lc == 1:
        return first.reshape(p, g, 1, -1)
    n_in = lc - 1  # completion tokens 0..Lc-2 are inputs; the last one is only a target
    group_cache = KVCache(k=tuple(_broadcast_to_group(k, g, n_in) for k in cache.k),
                          v=tuple(_broadcast_to_group(v, g, n_in) for v in cache.v))
    key_mask = jnp.concatenate([jnp.repeat(prompt_mask, g, axis=0), jnp.ones((p * g, n_in), bool)], axis=1)
    lengths = jnp.repeat(jnp.sum(prompt_mask, axis=-1), g)
    comp_positions = lengths[:, None] + jnp.arange(n_in)[None, :]
    comp_hidden, _ = model.hidden_with_cache(completion_ids.reshape(p * g, lc)[:, :-1], comp_positions, group_cache,
                                             write_index=lp, key_mask=key_mask)
    return jnp.concatenate([first, comp_hidden], axis=1).reshape(p, g, lc, -1)
