"""Token alignment of step scores / clause rewards with a real HF fast tokenizer trained offline."""

import dataclasses

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from rewardsql_jax.rewards.token_align import (
    TokenValues,
    batch_cocte_token_values,
    batch_token_values,
    blank_line_spans,
    clause_token_values,
    cocte_step_spans,
    cocte_token_values,
    pad_token_arrays,
    spans_to_token_values,
    token_span_ids,
)
from rewardsql_jax.sql.cocte import split_cocte

COCTE = (
    "WITH old AS (\n  SELECT name, age FROM singer WHERE age > 30\n),\n\n"
    "names AS (\n  SELECT name FROM old\n)\n\nSELECT COUNT(*) FROM names"
)
OTHER = "WITH t AS (SELECT country FROM singer)\n\nSELECT DISTINCT country FROM t ORDER BY country"


@pytest.fixture(scope="module", params=[True, False], ids=["trim_offsets", "raw_offsets"])
def hf_tokenizer(request):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=request.param)
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([COCTE, OTHER, "SELECT name FROM singer WHERE age > 30 GROUP BY name"] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def _offsets(hf, text):
    enc = hf(text, return_offsets_mapping=True, add_special_tokens=False)
    return enc["input_ids"], enc["offset_mapping"]


def _char_values(text, spans, fill=0.0):
    per_char = np.full(len(text), fill, np.float32)
    for (s, e), v in spans:
        per_char[s:e] = v
    return per_char


def test_every_token_gets_its_step_score(hf_tokenizer):
    ids, offsets = _offsets(hf_tokenizer, COCTE)
    scores = [0.9, 0.4, 0.7]  # two CTE steps + final query
    vals = cocte_token_values(COCTE, offsets, scores)
    assert vals.dtype == np.float32 and vals.shape == (len(ids),)
    spans = cocte_step_spans(COCTE)
    per_char = _char_values(COCTE, zip(spans, scores))
    for (s, e), v in zip(offsets, vals):
        if e > s:  # a token lying inside one segment carries that segment's score
            if len(set(per_char[s:e])) == 1:
                assert v == per_char[s]
        else:
            assert v == per_char[s]
    steps = split_cocte(COCTE).steps
    select_tok = [i for i, (s, e) in enumerate(offsets) if COCTE[s:e].strip() == "SELECT"]
    assert [vals[i] for i in select_tok] == pytest.approx([0.9, 0.4, 0.7])
    assert spans[0][0] == 0 and spans[-1][1] == len(COCTE) and spans[1][0] == steps[1].start


def test_segments_tile_the_text_and_follow_steps():
    spans = cocte_step_spans(COCTE)
    assert [COCTE[s:e] for s, e in spans] == [
        "WITH old AS (\n  SELECT name, age FROM singer WHERE age > 30\n),\n\n",
        "names AS (\n  SELECT name FROM old\n)",
        "\n\nSELECT COUNT(*) FROM names",
    ]
    assert cocte_step_spans("SELECT 1") == [(0, 8)]
    assert blank_line_spans("a\n\nb\n\nc") == [(0, 3), (3, 6), (6, 7)]


def test_blank_line_segments_work_on_unparseable_text(hf_tokenizer):
    text = "WITH broken AS (SELEC x\n\nSELECT y FROM"
    _, offsets = _offsets(hf_tokenizer, text)
    with pytest.raises(ValueError):
        cocte_token_values(text, offsets, [1.0, 0.0])
    vals = cocte_token_values(text, offsets, [1.0, 0.0], segments="blank_line")
    assert vals[0] == 1.0 and vals[-1] == 0.0


def test_scores_count_must_match_segments(hf_tokenizer):
    _, offsets = _offsets(hf_tokenizer, COCTE)
    vals = cocte_token_values(COCTE, offsets, [0.9, 0.4], fill=-1.0)  # final query gets fill
    assert vals[-1] == -1.0 and vals[0] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="step scores"):
        cocte_token_values(COCTE, offsets, [0.9])
    with pytest.raises(ValueError, match="segments"):
        cocte_token_values(COCTE, offsets, [0.9, 0.4, 0.7], segments="lines")


def test_overlap_rule_ties_fill_and_special_tokens():
    offsets = [(0, 4), (3, 7), (4, 6), (7, 9), (9, 9), (20, 25), (0, 0)]
    spans = [(0, 5, 1.0), (5, 9, 2.0)]
    vals = spans_to_token_values(offsets, spans, fill=-5.0)
    # (3,7) overlaps 2 chars of each span -> the earlier; (4,6) overlaps 1 and 1 -> earlier;
    # (9,9) empty at 9 -> no span contains 9; (20,25) outside; trailing (0,0) special token -> fill
    assert vals.tolist() == [1.0, 1.0, 1.0, 2.0, -5.0, -5.0, -5.0]
    assert token_span_ids([(0, 0), (2, 2), (6, 8)], [(0, 5), (5, 9)]).tolist() == [0, 0, 1]
    assert spans_to_token_values([], spans).shape == (0,)
    with pytest.raises(ValueError):
        spans_to_token_values([(3, 1)], spans)


def test_clause_rewards_to_tokens(hf_tokenizer):
    @dataclasses.dataclass(frozen=True)
    class Clause:
        kind: str
        start: int
        end: int
        reward: float

    sql = "SELECT name FROM singer WHERE age > 30"
    clauses = [Clause("SELECT", 0, 11, 0.5), Clause("FROM", 12, 23, 0.5), Clause("WHERE", 24, len(sql), -0.5)]
    _, offsets = _offsets(hf_tokenizer, sql)
    vals = clause_token_values(offsets, clauses)
    expected = _char_values(sql, [((c.start, c.end), c.reward) for c in clauses])
    for (s, e), v in zip(offsets, vals):
        if e > s and sql[s:e].strip():
            assert v == expected[s if sql[s] != " " else s + 1]


def test_batched_padding_and_mask(hf_tokenizer):
    texts = [COCTE, OTHER]
    offs = [_offsets(hf_tokenizer, t)[1] for t in texts]
    tv = batch_cocte_token_values(texts, offs, [[0.9, 0.4, 0.7], [0.2, 0.6]], fill=0.0, pad_to=128)
    assert isinstance(tv, TokenValues) and tv.values.shape == (2, 128) and tv.values.dtype == np.float32
    assert tv.mask.sum(axis=1).tolist() == [len(o) for o in offs]
    assert np.all(tv.values[~tv.mask] == 0.0)
    np.testing.assert_array_equal(tv.values[1, : len(offs[1])], cocte_token_values(OTHER, offs[1], [0.2, 0.6]))
    tv2 = batch_token_values(offs, [[(0, 10, 1.0)], [(0, 4, 3.0)]])
    assert tv2.values.shape == (2, max(len(o) for o in offs)) and tv2.values[1, 0] == 3.0
    with pytest.raises(ValueError, match="pad_to"):
        pad_token_arrays([np.zeros(5)], pad_to=3)
    with pytest.raises(ValueError, match="one entry per response"):
        batch_cocte_token_values(texts, offs[:1], [[1.0]])
