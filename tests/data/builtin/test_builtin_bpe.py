"""Byte-level BPE trainer: round trip, single-token PRM strings, AutoTokenizer reload, determinism."""

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rewardsql_jax.data import m_schema, make_builtin_benchmark, reward_sql_prompt, train_bpe_tokenizer
from rewardsql_jax.data.builtin import EOS_TOKEN, PAD_TOKEN, SINGLE_TOKEN_STRINGS

SPIDER_DEV = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "spider" / "dev.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_bench")
    train, test = make_builtin_benchmark(root, n_train_dbs=3, n_test_dbs=1, questions_per_db=15)
    texts = [reward_sql_prompt(m_schema(e.db_path), e.question, e.evidence) + e.gold_sql for e in train]
    return texts, [e.gold_sql for e in test]


@pytest.fixture(scope="module")
def tok_dir(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_bpe_tokenizer(corpus[0], 600, out)
    return out


def test_round_trip_on_sql_and_text(corpus, tok_dir):
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    samples = list(corpus[1]) + [
        "WITH a AS (SELECT id FROM t WHERE x > 1),\n\nb AS (SELECT * FROM a)\n\nSELECT count(*) FROM b;",
        "SELECT T1.name FROM t AS T1 WHERE T1.v - 2 + 3 >= 'Ünïcödé 名字' -- comment\n\t",
        "a и b и",
        "  leading and trailing spaces  ",
        "x+y-z",
        "<|endoftext|>",
    ]
    if SPIDER_DEV.is_file():
        samples += [r["query"] for r in json.loads(SPIDER_DEV.read_text())[:200]]
    for s in samples:
        assert tok.decode(tok.encode(s, add_special_tokens=False)) == s


def test_prm_strings_are_single_distinct_tokens(tok_dir):
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    ids = [tok.encode(s, add_special_tokens=False) for s in SINGLE_TOKEN_STRINGS]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == 3
    # The tag stays one token inside a PRM input too.
    tag = ids[0][0]
    seq = tok.encode("WITH a AS (SELECT 1) и SELECT * FROM a и", add_special_tokens=False)
    assert seq.count(tag) == 2


def test_special_tokens_and_reload(corpus, tok_dir):
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    assert tok.eos_token == EOS_TOKEN and tok.pad_token == PAD_TOKEN
    assert tok.eos_token_id != tok.pad_token_id
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == EOS_TOKEN
    assert len(tok) == 600
    assert tok("SELECT 1").input_ids == tok.encode("SELECT 1", add_special_tokens=False)  # no BOS added


def test_deterministic_training(corpus, tok_dir, tmp_path):
    again = train_bpe_tokenizer(corpus[0], 600, tmp_path)
    first = AutoTokenizer.from_pretrained(str(tok_dir))
    assert again.get_vocab() == first.get_vocab()
    assert (tmp_path / "tokenizer.json").read_text() == (tok_dir / "tokenizer.json").read_text()


def test_rejects_tiny_vocab_and_empty_corpus(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe_tokenizer(["x"], 200, tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        train_bpe_tokenizer([], 1000, tmp_path)
