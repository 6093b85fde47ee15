"""Tokenizers of the conductor's models: byte-level BPE plus the trajectory tags, shared by the from-scratch
policy and action model; or a pretrained policy's own tokenizer plus the tags (``policy_tokenizer``).

The six tags of ``format.TAGS`` are added as single (non-special) tokens, so ``</call>`` is one id the
sampler can stop on and the tag-aware mask has exact boundaries.
"""

from __future__ import annotations

from pathlib import Path

from rewardsql_jax.data.builtin import train_bpe_tokenizer

from ..actions.format import CALL_CLOSE, TAGS


def build_tokenizer(texts, vocab_size: int, save_dir: str | Path):
    """Train the BPE on ``texts``, add the tags, save to ``save_dir`` and return the tokenizer."""
    tok = train_bpe_tokenizer(texts, vocab_size, save_dir)
    return _with_tags(tok, save_dir)


def policy_tokenizer(shape, shared, save_dir: str | Path):
    """The orchestration policy's tokenizer: ``shared`` (the run's BPE) for a from-scratch policy; for a pretrained
    one (``policy.shape.path``) that model's own tokenizer with the tags added, saved to ``save_dir`` (the model's
    vocabulary grows to it: ``models.vocab.grow_vocab``)."""
    if not shape.path:
        return shared
    from rewardsql_jax.data.tokenizer import load_tokenizer

    return _with_tags(load_tokenizer(shape.tokenizer_path or shape.path), save_dir)


def action_tokenizer(shape, shared):
    """The built-in action model's tokenizer: ``shared`` (the run's BPE) for a from-scratch model; a pretrained one's
    own (``action.shape.path``, or ``action.shape.tokenizer_path``), whose chat template its prompts go through."""
    if not shape.path:
        return shared
    from rewardsql_jax.data.tokenizer import load_tokenizer

    tok = load_tokenizer(shape.tokenizer_path or shape.path)
    if not getattr(tok, "chat_template", None):
        raise ValueError(
            f"action.shape.path={shape.path}: its tokenizer has no chat template, which the pretrained action model's "
            f"prompts go through; use an instruct model's checkpoint (or action.shape.tokenizer_path)"
        )
    return tok


def _with_tags(tok, save_dir: str | Path):
    """``tok`` with the tags added as single tokens, saved to ``save_dir`` and read back."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAGS])
    tok.save_pretrained(str(save_dir))
    tok = AutoTokenizer.from_pretrained(str(save_dir))
    for t in TAGS:
        if len(tok(t, add_special_tokens=False).input_ids) != 1:
            raise RuntimeError(f"tag {t!r} is not a single token in the tokenizer saved in {save_dir}")
    return tok


def saved_tokenizer(save_dir: str | Path):
    """The tokenizer ``build_tokenizer`` saved in ``save_dir`` (a resumed run reads it back), or ``None``."""
    from transformers import AutoTokenizer

    if not (Path(save_dir) / "tokenizer.json").exists():
        return None
    return AutoTokenizer.from_pretrained(str(save_dir))


def stop_ids(tokenizer) -> tuple:
    """Ids that end one policy generation: ``</call>`` and EOS."""
    return (tokenizer.convert_tokens_to_ids(CALL_CLOSE), tokenizer.eos_token_id)
