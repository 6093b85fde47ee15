"""End-to-end ``generate``: parity with transformers, log-probs, EOS, ordering, seeds, recompiles, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rewardsql_jax.sampling import GenerationResult, filter_logits, generate, sampler

torch = pytest.importorskip("torch")

PROMPTS = [[3, 17, 42, 5, 9], list(range(20, 31)), [7] * 3 + list(range(60, 74)), [101]]


def _hf_greedy(tm, prompts, n_new, pad_id=0):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    with torch.no_grad():
        out = tm.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            do_sample=False,
            pad_token_id=pad_id,
            eos_token_id=None,
        )
    return out[:, width:].tolist()


def _reference_logits(model, prompts, new_tokens):
    """Logits predicting each generated token, from ONE right-padded full forward over prompt + generated.

    Returns a list of ``[len(new), V]`` arrays (row ``i`` continues ``prompts[i]``)."""
    seqs = [list(p) + list(t) for p, t in zip(prompts, new_tokens)]
    width = max(map(len, seqs))
    ids = np.zeros((len(seqs), width), np.int32)
    mask = np.zeros((len(seqs), width), bool)
    for i, q in enumerate(seqs):
        ids[i, : len(q)], mask[i, : len(q)] = q, True
    logits = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)))
    return [logits[i, len(p) - 1 : len(p) - 1 + len(t)] for i, (p, t) in enumerate(zip(prompts, new_tokens))]


def _reference_logprobs(model, prompts, new_tokens, temperature):
    """log_softmax(logits / T) of the generated tokens (T = 1 for greedy)."""
    t = temperature if temperature > 0 else 1.0
    out = []
    for logits, toks in zip(_reference_logits(model, prompts, new_tokens), new_tokens):
        logp = np.asarray(jax.nn.log_softmax(jnp.asarray(logits) / t, axis=-1))
        out.append(logp[np.arange(len(toks)), toks])
    return out


def test_greedy_matches_transformers_generate(torch_and_jax):
    tm, jm = torch_and_jax
    ref = _hf_greedy(tm, PROMPTS, 40)
    res = generate(jm, PROMPTS, max_new_tokens=40)
    assert isinstance(res, GenerationResult)
    assert res.tokens == ref
    assert res.prompt_lengths == [len(p) for p in PROMPTS] and res.finished == [False] * 4


def test_greedy_with_fixed_cache_len_is_the_same(torch_and_jax):
    _, jm = torch_and_jax
    a = generate(jm, PROMPTS, max_new_tokens=20)
    b = generate(jm, PROMPTS, max_new_tokens=20, max_cache_len=40)  # prompt width shrinks to 20
    assert a.tokens == b.tokens


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 10, 0.9)])
def test_logprobs_match_full_forward(torch_and_jax, temperature, top_k, top_p):
    _, jm = torch_and_jax
    res = generate(
        jm, PROMPTS[:3], max_new_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, num_samples=2, seed=4
    )
    prompts = [PROMPTS[row // 2] for row in range(6)]
    ref = _reference_logprobs(jm, prompts, res.tokens, temperature)
    for toks, lps, want in zip(res.tokens, res.logprobs, ref):
        assert len(toks) == len(lps) == 12
        np.testing.assert_allclose(lps, want, atol=1e-4)


def test_top_k_and_top_p_never_emit_excluded_tokens(torch_and_jax):
    _, jm = torch_and_jax
    for kw in (dict(top_p=0.5), dict(top_k=6, top_p=0.6)):  # full-vocab nucleus, and nucleus over the top-k
        res = generate(jm, PROMPTS[:2], max_new_tokens=8, temperature=1.0, num_samples=16, seed=1, **kw)
        prompts = [PROMPTS[row // 16] for row in range(32)]
        for toks, logits in zip(res.tokens, _reference_logits(jm, prompts, res.tokens)):
            allowed = np.isfinite(
                np.asarray(
                    filter_logits(logits, top_k=kw.get("top_k", 0), top_p=kw.get("top_p", 1.0), use_top_p="top_p" in kw)
                )
            )
            assert allowed[np.arange(len(toks)), toks].all(), kw


def _pooled_chi2_pvalue(counts, probs):
    n = counts.sum()
    small = probs * n < 5  # pool cells with expected count < 5 (chi-square validity)
    obs, exp = counts[~small], probs[~small] * n
    if small.any():
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, probs[small].sum() * n)
    return stats.chisquare(obs, exp).pvalue


def test_next_token_frequencies_match_softmax(torch_and_jax):
    _, jm = torch_and_jax
    n = 4000
    prompt = [1, 9, 33, 2, 40]
    res = generate(jm, [prompt], max_new_tokens=1, temperature=1.0, num_samples=n, seed=11)
    counts = np.bincount([t[0] for t in res.tokens], minlength=128)
    logits = np.asarray(jm(jnp.asarray([prompt]))[0, -1], dtype=np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    assert _pooled_chi2_pvalue(counts, probs) > 1e-3
    # TV distance below twice its expected value under sampling noise (normal approximation)
    expected_tv = 0.5 * np.sum(np.sqrt(2 * probs * (1 - probs) / (np.pi * n)))
    assert 0.5 * np.abs(counts / n - probs).sum() < 2 * expected_tv
    # the test has power: a wrong temperature is rejected
    wrong = np.exp((logits - logits.max()) / 1.5)
    assert _pooled_chi2_pvalue(counts, wrong / wrong.sum()) < 1e-6


def test_eos_stops_each_row_with_two_eos_ids(torch_and_jax):
    _, jm = torch_and_jax
    free = generate(jm, PROMPTS, max_new_tokens=24).tokens
    eos_a, eos_b = free[0][3], free[1][5]
    res = generate(jm, PROMPTS, max_new_tokens=24, eos_token_id=[eos_a, eos_b])
    for toks_free, toks, fin in zip(free, res.tokens, res.finished):
        hits = [i for i, t in enumerate(toks_free) if t in (eos_a, eos_b)]
        if hits:
            assert toks == toks_free[: hits[0] + 1] and fin  # EOS included, nothing after it
        else:
            assert toks == toks_free and not fin
    assert res.finished[0] and res.finished[1] and len(res.tokens[0]) <= 4 and len(res.tokens[1]) <= 6


def test_all_rows_done_stops_the_loop_and_pads(torch_and_jax):
    _, jm = torch_and_jax
    free = generate(jm, PROMPTS[:2], max_new_tokens=16).tokens
    eos = [free[0][0], free[1][0]]
    res = generate(jm, PROMPTS[:2], max_new_tokens=16, eos_token_id=eos, pad_id=77)
    assert res.tokens == [[free[0][0]], [free[1][0]]] and res.finished == [True, True]
    assert res.steps == 1  # the while_loop exited at once instead of running 16 steps
    late = generate(jm, PROMPTS[:2], max_new_tokens=16, eos_token_id=[free[0][2], free[1][0]])
    assert late.steps == max(len(t) for t in late.tokens) < 16


def test_prompt_major_order(torch_and_jax):
    _, jm = torch_and_jax
    single = [generate(jm, [p], max_new_tokens=10).tokens[0] for p in PROMPTS[:2]]
    res = generate(jm, PROMPTS[:2], max_new_tokens=10, num_samples=3)
    assert res.tokens == [single[0]] * 3 + [single[1]] * 3
    assert res.prompt_lengths == [len(PROMPTS[0])] * 3 + [len(PROMPTS[1])] * 3
    assert res.for_prompt(1) == [single[1]] * 3


def test_seed_determinism(torch_and_jax):
    _, jm = torch_and_jax
    kw = dict(max_new_tokens=10, temperature=1.0, num_samples=4)
    a = generate(jm, PROMPTS[:2], seed=5, **kw)
    b = generate(jm, PROMPTS[:2], seed=5, **kw)
    c = generate(jm, PROMPTS[:2], seed=6, **kw)
    assert a.tokens == b.tokens and a.logprobs == b.logprobs
    assert a.tokens != c.tokens
    assert len({tuple(t) for t in a.for_prompt(0)}) > 1  # samples of one prompt differ


def test_one_seed_a_prompt_does_not_depend_on_the_batch(tiny_model):
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    kw = dict(max_new_tokens=8, temperature=1.5)
    together = generate(tiny_model, prompts, seed=[11, 12, 13], **kw)
    alone = [generate(tiny_model, [p], seed=[s], **kw).tokens[0] for p, s in zip(prompts, (11, 12, 13))]
    assert together.tokens == alone  # a row's draw depends on its own seed alone
    reordered = generate(tiny_model, prompts[::-1], seed=[13, 12, 11], **kw)
    assert reordered.tokens[::-1] == together.tokens
    seeds = [generate(tiny_model, [prompts[0]], seed=[s], **kw).tokens[0] for s in range(6)]
    assert len({tuple(t) for t in seeds}) > 1
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        generate(tiny_model, prompts, seed=[1, 2], **kw)


def test_same_shapes_do_not_recompile(torch_and_jax):
    _, jm = torch_and_jax
    kw = dict(max_new_tokens=9, temperature=0.8, top_k=5, top_p=0.9, num_samples=2)
    generate(jm, [[1, 2, 3], [4, 5]], seed=0, eos_token_id=3, **kw)
    before = dict(sampler.TRACE_COUNTS)
    # other contents, lengths in the same bucket, seed, temperature, top_p, eos ids and max_new_tokens <= 16
    generate(
        jm,
        [[9, 8, 7, 6], [5]],
        seed=1,
        eos_token_id=[4, 5],
        **{**kw, "temperature": 1.1, "top_p": 0.5, "max_new_tokens": 12},
    )
    assert dict(sampler.TRACE_COUNTS) == before
    generate(jm, [[9, 8, 7, 6], [5]], **{**kw, "top_k": 6})  # top_k is static: one more trace each
    assert sampler.TRACE_COUNTS["decode"] == before["decode"] + 1


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(prompt_ids=[]), "prompt_ids is empty"),
        (dict(prompt_ids=[[1], []]), "prompt 1 is empty"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=2.0), "top_p"),
        (dict(num_samples=0), "num_samples"),
        (dict(max_cache_len=10), "max_cache_len=10"),
        (dict(max_new_tokens=300), "max_position_embeddings"),
        (dict(eos_token_id=[1, 500]), "eos_token_id"),
    ],
)
def test_bad_input_gives_clear_error(tiny_model, kw, match):
    args = dict(prompt_ids=[[1, 2, 3]], max_new_tokens=8)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        generate(tiny_model, args.pop("prompt_ids"), **args)


def test_decode_state_is_donated(tiny_model):
    from flax import nnx

    from rewardsql_jax.sampling.inputs import pad_prompts

    b = pad_prompts(
        [[1, 2, 3]], num_samples=2, pad_id=0, max_new_tokens=4, max_cache_len=None, max_positions=128, vocab_size=64
    )
    opts = sampler.SamplerOptions(
        greedy=True, top_k=0, use_top_p=False, cache_len=b.cache_len, gen_capacity=b.gen_capacity
    )
    g, s = nnx.split(tiny_model)
    one, eos, pad = jnp.float32(1.0), jnp.full((4,), -1, jnp.int32), jnp.int32(0)
    st = sampler.prefill(g, s, b.ids, b.mask, b.lengths, jax.random.key(0), one, one, eos, pad, opts=opts)
    out = sampler.decode_loop(g, s, st, jnp.int32(4), one, one, eos, pad, opts=opts)
    assert st.cache.k[0].is_deleted() and st.tokens.is_deleted()  # buffers reused in place, not copied
    assert int(out.step) == 4


def test_pallas_attention_impl_samples_the_same_tokens_as_xla(torch_and_jax):
    """attention_impl="pallas_interpret": prefill by the flash kernel, decode steps by the shared-prompt decode
    kernel (kernels.prefix_decode); the same greedy tokens and log-probs as the XLA paths."""
    from flax import nnx

    from rewardsql_jax.models import build_model

    _, model = torch_and_jax
    kernel_model = build_model(model.config.replace(attention_impl="pallas_interpret"))
    nnx.update(kernel_model, nnx.state(model))
    shared_head = _shared_head_prompts(np.random.default_rng(4), n=2, head=40)  # the kernel reads head + own
    for prompts in ([[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]], shared_head):
        want = generate(model, prompts, max_new_tokens=6, num_samples=2)
        got = generate(kernel_model, prompts, max_new_tokens=6, num_samples=2)
        assert got.tokens == want.tokens
        for a, b in zip(got.logprobs, want.logprobs):
            np.testing.assert_allclose(a, b, atol=1e-4)


def _shared_head_prompts(rng, n=3, head=70):
    """Prompts behind one common ``head``-token beginning (a schema), each with its own tail."""
    start = list(rng.integers(1, 128, size=head))
    return [start + list(rng.integers(1, 128, size=5 + 4 * i)) for i in range(n)]


def test_shared_prefix_prefill_matches_transformers_and_separate_prefills(torch_and_jax, monkeypatch):
    """Prompts sharing 64+ leading tokens prefill that part once (prefill_shared): the same greedy tokens as
    transformers, and the same samples and log-probs as separate prefills (share_prefix=False)."""
    tm, jm = torch_and_jax
    prompts = _shared_head_prompts(np.random.default_rng(3))
    calls, shared_prefill = [], sampler.prefill_shared
    monkeypatch.setattr(sampler, "prefill_shared", lambda *a, **k: calls.append(a[2].shape) or shared_prefill(*a, **k))
    greedy = generate(jm, prompts, max_new_tokens=24)
    assert calls == [(64,)]  # the prefix tokens, prefilled once
    assert greedy.tokens == _hf_greedy(tm, prompts, 24)
    assert greedy.prompt_lengths == [len(p) for p in prompts]
    for kw in ({}, {"temperature": 0.8, "num_samples": 3, "seed": 5}):
        shared = generate(jm, prompts, max_new_tokens=24, **kw)
        separate = generate(jm, prompts, max_new_tokens=24, share_prefix=False, **kw)
        assert shared.tokens == separate.tokens
        for a, b in zip(shared.logprobs, separate.logprobs):
            np.testing.assert_allclose(a, b, atol=1e-5)
    logp = _reference_logprobs(jm, prompts, greedy.tokens, 0.0)
    for a, b in zip(greedy.logprobs, logp):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_dropping_ended_rows_samples_what_the_whole_batch_would(tiny_model, monkeypatch):
    """Rows that have ended leave the batch between decode segments (keep_rows); the rows left draw the same
    tokens (one seed a prompt: each row's own key) with the same log-probs as in the uncut batch."""
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11]]
    kw = dict(max_new_tokens=60, temperature=1.0, num_samples=6, seed=[3, 4, 5, 6], eos_token_id=[0, 1, 2, 3, 4, 5])
    cuts, keep = [], sampler.keep_rows
    monkeypatch.setattr(sampler, "keep_rows", lambda st, rows: cuts.append(len(rows)) or keep(st, rows))
    cut = generate(tiny_model, prompts, **kw)
    assert cuts and cuts == sorted(cuts, reverse=True) and cuts[0] < 24  # the batch of 24 rows shrank
    monkeypatch.setattr(sampler, "MIN_ROWS", 10**6)  # never cut
    whole = generate(tiny_model, prompts, **kw)
    assert cut.tokens == whole.tokens and cut.finished == whole.finished and cut.steps == whole.steps
    for a, b in zip(cut.logprobs, whole.logprobs):
        np.testing.assert_allclose(a, b, atol=1e-5)
