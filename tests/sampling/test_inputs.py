"""Prompt padding/bucketing and argument checks of the sampler (host side)."""

import types

import numpy as np
import pytest

from rewardsql_jax.sampling.inputs import (
    check_options,
    normalize_eos,
    pad_id,
    pad_prompts,
    prompt_width,
    shared_prefix_length,
)

OK = dict(max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=0, num_samples=1)


def _pad(prompts, **kw):
    args = dict(num_samples=1, pad_id=0, max_new_tokens=8, max_cache_len=None, max_positions=1024, vocab_size=100)
    args.update(kw)
    return pad_prompts(prompts, **args)


def test_bucket_length():
    assert [prompt_width(n) for n in (1, 16, 17, 100, 128, 129, 512, 513, 1500)] == [
        16,
        16,
        32,
        128,
        128,
        256,
        512,
        1024,
        1536,
    ]


def test_left_padding_one_row_per_prompt_and_cache_size():
    b = _pad([[5, 6, 7], [9] * 20], num_samples=2, pad_id=3, max_new_tokens=17)
    assert b.ids.shape == (2, 32) and b.num_samples == 2  # the sampler repeats each prefilled prompt's cache
    np.testing.assert_array_equal(b.lengths, [3, 20])
    np.testing.assert_array_equal(b.ids[0, -3:], [5, 6, 7])
    assert (b.ids[0, :-3] == 3).all() and not b.mask[0, :-3].any() and b.mask[0, -3:].all()
    assert b.mask[1].sum() == 20
    assert b.gen_capacity == 32 and b.cache_len == 64


def test_max_cache_len_fixes_the_cache():
    b = _pad([[1] * 10], max_new_tokens=8, max_cache_len=24)
    assert b.cache_len == 24 and b.ids.shape[1] == 16 and b.gen_capacity == 8
    b = _pad([[1] * 10], max_new_tokens=8, max_cache_len=20)  # bucket 16 does not fit: shrink the prompt width
    assert b.cache_len == 20 and b.ids.shape[1] == 12 and b.mask[0].sum() == 10


@pytest.mark.parametrize(
    "prompts,match",
    [
        ([], "prompt_ids is empty"),
        ([[1, 2], []], "prompt 1 is empty"),
        ([1, 2, 3], "flat list of ints"),
        ([[1, 200]], "outside the vocabulary"),
        ([[-1]], "outside the vocabulary"),
    ],
)
def test_bad_prompts(prompts, match):
    with pytest.raises(ValueError, match=match):
        _pad(prompts)


def test_prompt_too_long_for_cache_or_positions():
    with pytest.raises(ValueError, match="max_cache_len=16"):
        _pad([[1] * 10], max_new_tokens=8, max_cache_len=16)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        _pad([[1] * 10], max_new_tokens=8, max_positions=17)


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(num_samples=0), "num_samples"),
        (dict(max_new_tokens=0), "max_new_tokens"),
    ],
)
def test_bad_options(bad, match):
    check_options(**OK)
    with pytest.raises(ValueError, match=match):
        check_options(**{**OK, **bad})


def test_normalize_eos():
    assert normalize_eos(None) == () and normalize_eos(7) == (7,) and normalize_eos([1, np.int64(2)]) == (1, 2)


def test_pad_id_is_the_pad_token_else_eos():
    assert pad_id(types.SimpleNamespace(pad_token_id=3, eos_token_id=7)) == 3
    assert pad_id(types.SimpleNamespace(pad_token_id=0, eos_token_id=7)) == 0  # id 0 is a real pad id
    assert pad_id(types.SimpleNamespace(pad_token_id=None, eos_token_id=7)) == 7


def test_shared_prefix_length_rounds_down_and_leaves_each_prompt_a_token():
    head = list(range(1, 140))
    assert shared_prefix_length([head + [7], head + [8, 9]]) == 128  # 139 shared -> 128
    assert shared_prefix_length([head[:65], head[:65] + [3]]) == 64  # the shorter one keeps its last token
    assert shared_prefix_length([head[:64], head[:64] + [3]]) == 32  # 63 left to share
    assert shared_prefix_length([head[:32], head[:32] + [3]]) == 0  # 31: under one multiple
    assert shared_prefix_length([head, [0] + head]) == 0  # differ at the first token
    assert shared_prefix_length([head]) == 0  # one prompt: nothing to share
    assert shared_prefix_length([head, head, head[:100] + [5] * 50], multiple=32) == 96


def test_pad_prompts_with_a_shared_prefix():
    head = list(range(1, 71))
    prompts = [head + [90, 91], head + [92, 93, 94, 95]]
    kw = dict(num_samples=2, pad_id=0, max_new_tokens=10, max_cache_len=None, max_positions=512, vocab_size=128)
    b = pad_prompts(prompts, share_prefix=True, **kw)
    assert b.prefix.tolist() == head[:64]
    assert b.ids.shape == (2, 32) and b.ids[0, -8:].tolist() == head[64:] + [90, 91]
    assert b.mask.sum(axis=1).tolist() == [8, 10] and b.lengths.tolist() == [72, 74]
    assert b.cache_len == 64 + 32 + 16 and b.gen_capacity == 16
    assert pad_prompts(prompts, share_prefix=True, **{**kw, "max_cache_len": 100}).prefix.size == 0
    assert pad_prompts(prompts, **kw).prefix.size == 0
