"""Local HF tokenizers and prompt formatting: raw strings by default (Reward-SQL), chat template on request."""

from __future__ import annotations

from pathlib import Path

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(path):
    """Load a tokenizer from a local HF directory through ``transformers.AutoTokenizer`` (no network)."""
    from transformers import AutoTokenizer  # slow import; only callers that tokenise pay for it

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer directory {path} does not exist")
    if not any((path / name).exists() for name in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"no tokenizer files in {path} (looked for {', '.join(_TOKENIZER_FILES)}); "
            "save one there with tokenizer.save_pretrained(path)"
        )
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def format_prompt(tokenizer, text: str, *, chat_template: bool = False, system: str | None = None) -> str:
    """The string the policy sees for user ``text``.

    Default: ``text`` unchanged (Reward-SQL feeds raw prompts). With ``chat_template=True`` the
    tokenizer's chat template wraps ``[system?, user]`` and appends the assistant generation prompt.
    """
    if not isinstance(text, str):
        raise TypeError(f"prompt text must be a str, got {type(text).__name__}")
    if not chat_template:
        if system is not None:
            raise ValueError("system= only applies with chat_template=True; prepend it to the raw prompt instead")
        return text
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"chat_template=True but tokenizer {type(tokenizer).__name__} has no chat template; "
            "use a chat model's tokenizer, set tokenizer.chat_template, or use raw prompts (chat_template=False)"
        )
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": text}
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompts(tokenizer, texts, *, chat_template: bool = False, system: str | None = None) -> list[list[int]]:
    """Token ids of each formatted prompt.

    Raw prompts get the tokenizer's usual special tokens (e.g. Llama's BOS; Qwen adds none); templated
    prompts get none beyond what the template writes, so BOS is never doubled.
    """
    if isinstance(texts, str):
        raise TypeError("encode_prompts takes a list of strings; wrap a single prompt in a list")
    texts = list(texts)
    if not texts:
        raise ValueError("encode_prompts got an empty list of prompts")
    out = []
    for text in texts:
        ids = tokenizer.encode(
            format_prompt(tokenizer, text, chat_template=chat_template, system=system),
            add_special_tokens=not chat_template,
        )
        if not ids:
            raise ValueError(f"prompt {text!r} encodes to no tokens; prompts must be non-empty")
        out.append([int(i) for i in ids])
    return out
