"""Byte-level BPE tokenizers built from a GGUF file's metadata (llama.cpp's ``tokenizer.ggml.*`` keys).

A GGUF carries no ``tokenizer.json``: llama.cpp stores the vocabulary, the merges, each token's type, the
special token ids, ``add_bos_token`` and the chat template as metadata. :func:`read_gguf_metadata` reads those
through ``gguf.GGUFReader`` (memory-mapped; no tensor data is read) and :func:`tokenizer_from_metadata` builds
a ``tokenizers.Tokenizer`` wrapped in a ``transformers.PreTrainedTokenizerFast``, so callers use it like any HF
tokenizer (``encode``, ``decode``, ``apply_chat_template``, ``save_pretrained``).

Only ``tokenizer.ggml.model == "gpt2"`` (byte-level BPE: Qwen2, Llama 3, SmolLM, GPT-2) is built. Text is split
before BPE the way llama.cpp splits it for the file's ``tokenizer.ggml.pre`` (``_SPLITS``), so the ids are the
ones llama.cpp (and the model's original HF tokenizer) produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

_HINT = (
    "or load it with transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name), save that with "
    "save_pretrained(out) and pass the folder out"
)

# tokenizer.ggml.token_type values (gguf.TokenType) that are added tokens, matched whole in the raw text.
_CONTROL = 3  # special: <|im_start|>, <|endoftext|>
_USER_DEFINED = 4  # added but not special: <think>

# The pre-tokenizer regexes llama.cpp (src/llama-vocab.cpp) and the models' own tokenizer.json files use.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGIT = r"\p{N}"  # SmolLM / StarCoder: every digit on its own, then GPT-2's split
# llama.cpp's fallback for a file that names no pre-tokenizer (it warns that quality may degrade)
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")

# tokenizer.ggml.pre -> regexes applied in turn, each splitting the pieces the one before left (llama.cpp's order)
_SPLITS: dict[str, tuple[str, ...]] = {
    "default": _DEFAULT,
    "gpt2": (_GPT2,),
    "gpt-2": (_GPT2,),
    "smollm": (_DIGIT, _GPT2),
    "starcoder": (_DIGIT, _GPT2),
    "refact": (_DIGIT, _GPT2),
    "llama-bpe": (_LLAMA3,),
    "llama3": (_LLAMA3,),
    "llama-v3": (_LLAMA3,),
    "falcon3": (_LLAMA3,),
    "dbrx": (_LLAMA3,),
    "smaug-bpe": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "deepseek-r1-qwen": (_QWEN2,),
    "megrez": (_QWEN2,),
    "stablelm2": (_QWEN2,),
}
# llama.cpp's Llama 3 settings: add BOS unless the file says otherwise, and keep a piece that is a whole token
# in the vocabulary as that token (ignore_merges, as Llama 3's own tokenizer.json does)
_LLAMA3_FAMILY = frozenset({"llama-bpe", "llama3", "llama-v3", "falcon3"})


def _byte_to_char() -> list[str]:
    """GPT-2's byte -> printable character table (the alphabet byte-level BPE vocabularies are spelled in)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = [], 0
    for byte in range(256):
        if byte in printable:
            table.append(chr(byte))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return table


def read_gguf_metadata(path) -> dict[str, Any]:
    """``general.architecture`` and every ``tokenizer.*`` key of a GGUF file, as Python values (the file is
    memory-mapped and checked by ``models.gguf.open_gguf``; no tensor data is read)."""
    from rewardsql_jax.models.gguf import gguf_metadata, open_gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist")
    meta = gguf_metadata(open_gguf(path))
    return {k: v for k, v in meta.items() if k == "general.architecture" or k.startswith("tokenizer.")}


def _pre_tokenizer(pre: str, source: str):
    """llama.cpp's split for ``tokenizer.ggml.pre`` = ``pre``, then the byte -> character mapping."""
    from tokenizers import Regex, pre_tokenizers

    if pre not in _SPLITS:
        raise ValueError(
            f"{source}: GGUF pre-tokenizer tokenizer.ggml.pre={pre!r} is not supported (supported: "
            f"{', '.join(sorted(_SPLITS))}); {_HINT}"
        )
    splits = [pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in _SPLITS[pre]]
    return pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def tokenizer_from_metadata(meta: Mapping[str, Any], source: str = "GGUF metadata"):
    """A ``transformers.PreTrainedTokenizerFast`` for the byte-level BPE tokenizer ``meta`` describes.

    ``meta`` maps GGUF keys to values (:func:`read_gguf_metadata`); ``source`` names the file in errors.
    Token ``i`` of ``tokenizer.ggml.tokens`` gets id ``i``. Control tokens become special tokens and
    user-defined ones plain added tokens, both matched whole in the text (spelled as the text writes them).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    kind = meta.get("tokenizer.ggml.model")
    if kind == "llama":
        raise ValueError(
            f"{source}: SentencePiece GGUF tokenizers (tokenizer.ggml.model='llama') are not supported yet, only "
            f"byte-level BPE ('gpt2'); {_HINT}"
        )
    if kind != "gpt2":
        raise ValueError(
            f"{source}: unknown GGUF tokenizer model tokenizer.ggml.model={kind!r}; only byte-level BPE ('gpt2') "
            f"is supported; {_HINT}"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges")
    if not tokens or merges is None:
        missing = "tokenizer.ggml.tokens" if not tokens else "tokenizer.ggml.merges"
        raise ValueError(f"{source}: the GGUF metadata has no {missing}, so it holds no usable BPE tokenizer")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(f"{source}: {len(types)} token types for {len(tokens)} tokens; the file is corrupt")

    pre = meta.get("tokenizer.ggml.pre", "default")  # llama.cpp's choice for a file that names none
    pre_tokenizer = _pre_tokenizer(pre, source)
    byte_chars = _byte_to_char()
    alphabet = set(byte_chars)
    added = {i for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)}
    # Ordinary tokens are stored in the byte alphabet; the rare one that is not gets spelled in it.
    spelled = [
        tok if i in added or set(tok) <= alphabet else "".join(byte_chars[b] for b in tok.encode("utf-8"))
        for i, tok in enumerate(tokens)
    ]
    pairs = []
    for n, merge in enumerate(merges):
        cut = merge.find(" ", 1)  # llama.cpp's split: the first space after the first character
        if cut < 0:
            raise ValueError(f"{source}: GGUF merge #{n} {merge!r} has no space; the file is corrupt")
        pairs.append((merge[:cut], merge[cut + 1 :]))
    try:
        bpe = models.BPE(
            vocab={tok: i for i, tok in enumerate(spelled)},  # a repeated token keeps its last id, as in llama.cpp
            merges=pairs,
            fuse_unk=False,
            ignore_merges=pre in _LLAMA3_FAMILY,
        )
    except Exception as err:  # tokenizers raises a bare Exception for a merge of unknown tokens
        raise ValueError(f"{source}: the GGUF merges do not fit its token list ({err}); the file is corrupt") from err
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    control = [spelled[i] for i in sorted(added) if types[i] == _CONTROL]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tok.add_tokens(
        [AddedToken(spelled[i], special=False, normalized=False) for i in sorted(added) if types[i] == _USER_DEFINED]
    )

    named = {}
    for name, key in (
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("unk", "unknown_token_id"),
        ("pad", "padding_token_id"),
    ):
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None and not 0 <= token_id < len(tokens):
            raise ValueError(f"{source}: tokenizer.ggml.{key}={token_id} is not a token id (0..{len(tokens) - 1})")
        named[f"{name}_token"] = None if token_id is None else spelled[token_id]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        name_or_path=source,
        **named,
        extra_special_tokens=control,
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", pre in _LLAMA3_FAMILY)),
        add_eos_token=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )


def load_gguf_tokenizer(path):
    """The tokenizer stored in the GGUF file ``path`` (see the module docstring)."""
    return tokenizer_from_metadata(read_gguf_metadata(path), source=str(path))
