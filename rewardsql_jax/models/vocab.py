"""New tokens for a pretrained model: its vocabulary grown to a tokenizer that had tokens added (SQLConductor's
trajectory tags on a pretrained policy), as ``transformers``' ``resize_token_embeddings`` followed by setting each new
row to the mean of the old ones.

The mean row is the usual starting point for an added token (Hewitt, "Initializing new word embeddings for
pretrained language models", 2021): every existing token's logit is unchanged, and a new token's logit is the
average of the old ones' logits plus nothing that favours it, so the model does not start emitting it; SFT then
learns where it belongs. Deterministic, unlike ``transformers``' ``mean_resizing`` (which samples around the mean).
"""

from __future__ import annotations

import jax.numpy as jnp


def grow_vocab(model, vocab_size: int):
    """``model`` (a ``CausalLM``) with room for ``vocab_size`` tokens, in place and returned: the embedding matrix
    (and an untied output projection) gains rows set to the mean of the existing ones; ``config.vocab_size`` follows.
    A size below the model's raises ValueError (tokens cannot be removed); the same size changes nothing."""
    old = model.config.vocab_size
    if vocab_size < old:
        raise ValueError(
            f"cannot shrink the vocabulary from {old} to {vocab_size} tokens: the tokenizer has fewer tokens than the "
            f"model; use the model's own tokenizer (with any added tokens)"
        )
    if vocab_size == old:
        return model
    extra = vocab_size - old
    embed = model.embed_tokens[...]
    mean_row = jnp.mean(embed.astype(jnp.float32), axis=0, keepdims=True).astype(embed.dtype)
    model.embed_tokens.value = jnp.concatenate([embed, jnp.repeat(mean_row, extra, axis=0)], axis=0)
    if model.lm_head is not None:
        kernel = model.lm_head.kernel[...]  # [D, V]
        mean_col = jnp.mean(kernel.astype(jnp.float32), axis=1, keepdims=True).astype(kernel.dtype)
        model.lm_head.kernel.value = jnp.concatenate([kernel, jnp.repeat(mean_col, extra, axis=1)], axis=1)
    model.config = model.config.replace(vocab_size=vocab_size)
    return model
