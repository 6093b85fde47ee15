"""A byte-level BPE tokenizer trained from scratch for the built-in pipeline's small models.

Byte-level (GPT-2 / Qwen style) so every string round-trips: `decode(encode(s)) == s` for any
SQL or question text. Special tokens: "<|endoftext|>" (eos) and "<|pad|>" (pad), no BOS.
Reward-SQL's PRM reads its score at the step tag " и" from the logits of " +" and " -"
(DESIGN.md), so those three strings must each be one token: they are added as (non-special)
added tokens whenever BPE did not already learn them as single tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SINGLE_TOKEN_STRINGS = (" и", " +", " -")


def _single_token(tok, text: str) -> bool:
    return len(tok.encode(text, add_special_tokens=False).ids) == 1


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, save_dir: str | Path, *, min_frequency: int = 2
) -> PreTrainedTokenizerBase:
    """Train a byte-level BPE on `texts`, save it with save_pretrained to `save_dir`, and return it.

    `vocab_size` counts the 256 byte symbols and the special/added tokens, so it must be larger
    than 256 + 5. The saved folder loads with `AutoTokenizer.from_pretrained(save_dir)`.
    Training is deterministic for the same texts (in the same order) and arguments.
    """
    if vocab_size <= 256 + 2 + len(SINGLE_TOKEN_STRINGS):
        raise ValueError(
            f"vocab_size must exceed {256 + 2 + len(SINGLE_TOKEN_STRINGS)} (256 bytes + special "
            f"and step tokens), got {vocab_size}"
        )
    # Imported here: transformers takes seconds to import and most users of rewardsql_jax.data never train one.
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    texts = list(texts)
    if not texts:
        raise ValueError("train_bpe_tokenizer needs at least one training text")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SINGLE_TOKEN_STRINGS),
        min_frequency=min_frequency,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    missing = [s for s in SINGLE_TOKEN_STRINGS if not _single_token(tok, s)]
    if missing:
        tok.add_tokens([AddedToken(s, normalized=False, special=False) for s in missing])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(save_dir))
    return AutoTokenizer.from_pretrained(str(save_dir))
