"""load_tokenizer / format_prompt / encode_prompts with tokenizers built offline."""

import pytest

pytest.importorskip("transformers")

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rewardsql_jax.data.tokenizer import encode_prompts, format_prompt, load_tokenizer

WORDS = [
    "<pad>",
    "<s>",
    "</s>",
    "<unk>",
    "SELECT",
    "name",
    "FROM",
    "singer",
    "system:",
    "user:",
    "assistant:",
    "be",
    "brief",
    "|",
    "how",
    "many",
]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} | {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def _save(path, chat_template=None, bos=False):
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:
        from tokenizers import processors

        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    if chat_template:
        hf.chat_template = chat_template
    hf.save_pretrained(str(path))
    return path


def test_raw_prompt_is_unchanged_and_encodes(tmp_path):
    tok = load_tokenizer(_save(tmp_path))
    assert format_prompt(tok, "SELECT name FROM singer") == "SELECT name FROM singer"
    assert encode_prompts(tok, ["SELECT name", "FROM singer"]) == [[4, 5], [6, 7]]


def test_raw_prompt_keeps_tokenizer_bos_once(tmp_path):
    tok = load_tokenizer(_save(tmp_path, bos=True))
    assert encode_prompts(tok, ["SELECT name"]) == [[1, 4, 5]]


def test_chat_template_applied_when_requested(tmp_path):
    tok = load_tokenizer(_save(tmp_path, chat_template=TEMPLATE, bos=True))
    assert format_prompt(tok, "how many") == "how many"  # raw by default even when a template exists
    text = format_prompt(tok, "how many", chat_template=True, system="be brief")
    assert text == "system: be brief | user: how many | assistant: "
    ids = encode_prompts(tok, ["how many"], chat_template=True)
    assert ids == [[9, 14, 15, 13, 10]]  # no BOS added on top of the template


def test_chat_template_requested_but_missing(tmp_path):
    tok = load_tokenizer(_save(tmp_path))
    with pytest.raises(ValueError, match="has no chat template"):
        format_prompt(tok, "how many", chat_template=True)


def test_system_without_template_is_an_error(tmp_path):
    tok = load_tokenizer(_save(tmp_path))
    with pytest.raises(ValueError, match="system= only applies"):
        format_prompt(tok, "how many", system="be brief")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        load_tokenizer(tmp_path / "empty")


def test_encode_prompts_input_errors(tmp_path):
    tok = load_tokenizer(_save(tmp_path))
    with pytest.raises(ValueError, match="empty list"):
        encode_prompts(tok, [])
    with pytest.raises(TypeError, match="list of strings"):
        encode_prompts(tok, "SELECT name")
    with pytest.raises(ValueError, match="no tokens"):
        encode_prompts(tok, [""])
