"""Forward pass of G completions that share one prompt, with the prompt computed once (GRPO groups).

A GRPO batch holds ``P`` prompts with ``G`` sampled completions each. Run as ``P * G`` independent
``prompt + completion`` rows, every prompt token goes through the model G times although its activations
are identical in all G rows (causal attention: a prompt token never sees the completion). Here the
prompt runs once per group through ``hidden_with_cache``; the G completions then run as one chunk that attends
to the prompt's per-layer keys/values, stored once per prompt (``attention_math.prefix_attention``). The hidden states -- and therefore the
loss and, by the chain rule (the prompt's gradient is the sum over its G completions), the gradients -- equal the unshared
ones up to fp32 summation order, while the prompt's share of the FLOPs drops by G. With Reward-SQL's
shapes (prompt up to 8192 tokens, 512 generated, G = 8) that is most of the step.
"""

from __future__ import annotations

import jax.numpy as jnp

from .transformer import init_cache


def shared_prefix_hidden(model, prompt_ids, prompt_mask, completion_ids):
    """Final hidden states that predict each completion token, computing every prompt once.

    ``prompt_ids``/``prompt_mask`` ``[P, Lp]`` LEFT-padded (the last slot of every prompt is a real token);
    ``completion_ids`` ``[P, G, Lc]`` right-padded, completion k of prompt p in ``[p, k]``. Returns
    ``[P, G, Lc, D]`` where entry t is the state after ``prompt + completion[:t]``, i.e. the one whose
    logits give ``p(completion[t] | ...)``. Positions follow ``CausalLM.hidden_states`` (padding skipped).
    """
    prompt_ids, completion_ids = jnp.asarray(prompt_ids), jnp.asarray(completion_ids)
    if prompt_ids.ndim != 2 or completion_ids.ndim != 3 or completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(
            f"prompt_ids must be [P, Lp] and completion_ids [P, G, Lc] with the same P, got "
            f"{prompt_ids.shape} and {completion_ids.shape}"
        )
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
    # The completions attend to their prompt's keys/values stored once per prompt (prefix_attention, as in the
    # sampler): no [P * G, Lp] copy of the prompt cache, and its gradient arrives already summed over the group.
    prompt_cache = cache.as_heads_first()
    own_cache = init_cache(cfg, p * g, n_in, heads_first=True)
    lengths = jnp.repeat(jnp.sum(prompt_mask, axis=-1), g)
    comp_positions = lengths[:, None] + jnp.arange(n_in)[None, :]
    comp_hidden, _ = model.hidden_with_cache(
        completion_ids.reshape(p * g, lc)[:, :-1],
        comp_positions,
        own_cache,
        write_index=0,
        key_mask=jnp.ones((p * g, n_in), bool),
        prefix=(prompt_cache, prompt_mask),
    )
    return jnp.concatenate([first, comp_hidden], axis=1).reshape(p, g, lc, -1)


def common_prefix_hidden(model, prefix_ids, ids, mask):
    """Rows that all begin with the same ``C`` tokens, that prefix computed once (a database's schema prompt).

    ``prefix_ids`` ``[C]``: the tokens every row starts with; ``ids``/``mask`` ``[N, L]``: what follows in each row,
    padded on either side (positions count real tokens only, after the prefix). The prefix runs once through
    ``hidden_with_cache`` as a batch of one; the N rows then run as one chunk attending to its keys/values, stored
    once (``attention_math.prefix_attention`` with one prompt and N rows). Returns ``(hidden [N, L, D], prefix_cache,
    rows_cache)``, both caches heads-first (``[1, Hkv, C, D]`` and ``[N, Hkv, L, D]`` per layer). The hidden states
    equal those of the N whole rows up to fp32 summation order; the prefix's share of the FLOPs drops by N.
    """
    c, (n, length) = prefix_ids.shape[0], ids.shape
    cfg = model.config
    head = init_cache(cfg, 1, c)
    everywhere = jnp.ones((1, c), bool)
    _, head = model.hidden_with_cache(prefix_ids[None], jnp.arange(c)[None], head, write_index=0, key_mask=everywhere)
    head = head.as_heads_first()
    mask = mask.astype(bool)
    rows = init_cache(cfg, n, length, heads_first=True)
    positions = c + jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)
    hidden, rows = model.hidden_with_cache(
        ids, positions, rows, write_index=0, key_mask=mask, prefix=(head, everywhere)
    )
    return hidden, head, rows
