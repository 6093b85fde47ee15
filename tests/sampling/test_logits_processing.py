"""Top-k / top-p filters against transformers' warpers, and sampling statistics on fixed logits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rewardsql_jax.sampling import filter_logits, sample_tokens, top_k_filter, top_p_filter

torch = pytest.importorskip("torch")


def _logits(seed=0, b=6, v=40, scale=2.0):
    return np.random.default_rng(seed).normal(size=(b, v)).astype(np.float32) * scale


def _hf_mask(warpers, x):
    scores = torch.tensor(x)
    for w in warpers:
        scores = w(None, scores)
    return np.isfinite(scores.numpy())


@pytest.mark.parametrize("k", [1, 3, 17])
def test_top_k_matches_hf(k):
    from transformers.generation.logits_process import TopKLogitsWarper

    x = _logits(k)
    got = np.isfinite(np.asarray(top_k_filter(jnp.asarray(x), k)))
    assert (got.sum(-1) == k).all()
    np.testing.assert_array_equal(got, _hf_mask([TopKLogitsWarper(k)], x))


def test_top_k_off_is_identity():
    x = jnp.asarray(_logits())
    np.testing.assert_array_equal(np.asarray(top_k_filter(x, 0)), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(top_k_filter(x, 40)), np.asarray(x))


@pytest.mark.parametrize("p", [0.05, 0.3, 0.75, 0.95, 1.0])
def test_top_p_matches_hf(p):
    from transformers.generation.logits_process import TopPLogitsWarper

    x = _logits(int(p * 100))
    got = np.isfinite(np.asarray(top_p_filter(jnp.asarray(x), p)))
    np.testing.assert_array_equal(got, _hf_mask([TopPLogitsWarper(p)], x))
    assert (got.sum(-1) >= 1).all()
    kept_mass = (jax.nn.softmax(jnp.asarray(x), -1) * got).sum(-1)
    assert (np.asarray(kept_mass) >= min(p, 1.0) - 1e-6).all()


def test_top_p_tiny_keeps_the_argmax_only():
    x = _logits(3)
    got = np.isfinite(np.asarray(top_p_filter(jnp.asarray(x), 1e-6)))
    assert (got.sum(-1) == 1).all()
    assert (got[np.arange(len(x)), x.argmax(-1)]).all()


@pytest.mark.parametrize("k,p", [(5, 0.6), (12, 0.9), (3, 0.999)])
def test_top_k_then_top_p_matches_hf(k, p):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    x = _logits(k)
    got = np.isfinite(np.asarray(filter_logits(jnp.asarray(x), top_k=k, top_p=p, use_top_p=True)))
    np.testing.assert_array_equal(got, _hf_mask([TopKLogitsWarper(k), TopPLogitsWarper(p)], x))


def _chi2_pvalue(tokens, probs):
    counts = np.bincount(tokens, minlength=len(probs))
    probs = np.asarray(probs, np.float64)
    probs = probs / probs.sum()
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token outside the support"
    return stats.chisquare(counts[support], probs[support] * len(tokens)).pvalue


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_sampling_frequencies_match_softmax(temperature):
    n, v = 20000, 24
    row = np.random.default_rng(7).normal(size=v).astype(np.float32)
    logits = jnp.broadcast_to(jnp.asarray(row), (n, v))
    tok, logp = sample_tokens(jax.random.key(1), logits, temperature=temperature, greedy=False)
    probs = np.asarray(jax.nn.softmax(jnp.asarray(row) / temperature))
    assert _chi2_pvalue(np.asarray(tok), probs) > 1e-3
    np.testing.assert_allclose(np.asarray(logp), np.log(probs)[np.asarray(tok)], atol=1e-5)
    # and the test has power: the untempered / uniform distributions are rejected
    other = np.asarray(jax.nn.softmax(jnp.asarray(row) / (2.0 * temperature)))
    assert _chi2_pvalue(np.asarray(tok), other) < 1e-6


def test_sampling_with_filters_matches_renormalised_distribution():
    n, v, k, p = 20000, 32, 8, 0.7
    row = np.random.default_rng(3).normal(size=v).astype(np.float32) * 1.5
    logits = jnp.broadcast_to(jnp.asarray(row), (n, v))
    tok, logp = sample_tokens(
        jax.random.key(2), logits, temperature=1.0, greedy=False, top_k=k, top_p=p, use_top_p=True
    )
    filtered = np.asarray(filter_logits(jnp.asarray(row)[None], top_k=k, top_p=p, use_top_p=True))[0]
    probs = np.asarray(jax.nn.softmax(jnp.asarray(filtered)))
    assert 1 < (probs > 0).sum() < k
    assert _chi2_pvalue(np.asarray(tok), probs) > 1e-3
    # log-probs are of the unfiltered temperature-scaled distribution
    full = np.asarray(jax.nn.log_softmax(jnp.asarray(row)))
    np.testing.assert_allclose(np.asarray(logp), full[np.asarray(tok)], atol=1e-5)


def test_greedy_takes_argmax_with_raw_log_softmax():
    x = _logits(5)
    tok, logp = sample_tokens(jax.random.key(0), jnp.asarray(x), temperature=0.0, greedy=True)
    np.testing.assert_array_equal(np.asarray(tok), x.argmax(-1))
    ref = np.asarray(jax.nn.log_softmax(jnp.asarray(x)))[np.arange(len(x)), x.argmax(-1)]
    np.testing.assert_allclose(np.asarray(logp), ref, atol=1e-6)
