"""Parity against transformers' own Qwen2 / Llama (PyTorch, CPU) on the same random weights.

Weights go through our ``from_pretrained`` of the HF-saved directory.

Tolerances:
- fp32 logits: max abs diff <= 1e-4 (measured ~2e-7 to 4e-7).
- bf16 (params and compute in bf16): logits max abs diff vs the fp32 reference <= 1e-2, and vs HF's
  own bf16 forward <= 1e-2; our bf16 error must also stay within 2x HF's bf16 error. Measured on these
  shapes (logit scale 0.5-1.3): ours-bf16 vs fp32 3.3e-3 to 4.7e-3, HF-bf16 vs fp32 3.5e-3 to 5.0e-3,
  ours-bf16 vs HF-bf16 2.4e-3 to 4.1e-3 (bf16 has an 8-bit mantissa: ~4e-3 relative per rounding).
- gradients of a mean token CE loss: max abs diff <= 1e-4 x max |torch grad| per tensor.
"""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from rewardsql_jax.models import from_pretrained

from _hf_tiny import hf_logits, jax_logits, make_hf_model, save_hf_model

pytestmark = pytest.mark.parity

SHAPES = {
    "qwen2-untied-gqa": ("qwen2", dict()),
    "qwen2-tied-mqa-theta1e6": ("qwen2", dict(tie_word_embeddings=True, num_key_value_heads=1, rope_theta=1e6)),
    "llama-untied-mha": ("llama", dict(num_key_value_heads=4)),
    "llama-tied-mqa-theta1e6-bias": (
        "llama",
        dict(tie_word_embeddings=True, num_key_value_heads=1, rope_theta=1e6, attention_bias=True),
    ),
    "qwen2-3layers-8heads": (
        "qwen2",
        dict(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=64),
    ),
}
IDS = np.random.RandomState(0).randint(0, 128, (2, 16)).astype(np.int64)


@pytest.fixture(scope="module", params=list(SHAPES))
def pair(request, tmp_path_factory):
    family, kw = SHAPES[request.param]
    hf = make_hf_model(family, seed=len(request.param), **kw)
    path = save_hf_model(hf, tmp_path_factory.mktemp(request.param))
    return request.param, hf, path


def test_fp32_logits(pair):
    _, hf, path = pair
    ours = from_pretrained(path)
    diff = np.abs(jax_logits(ours, IDS) - hf_logits(hf, IDS)).max()
    assert diff <= 1e-4, diff


def test_bf16_logits_within_documented_tolerance(pair):
    name, hf, path = pair
    family, kw = SHAPES[name]
    ref32 = hf_logits(hf, IDS)
    hf16 = make_hf_model(family, seed=len(name), **kw).to(torch.bfloat16)
    ref16 = hf_logits(hf16, IDS)
    ours = from_pretrained(path, dtype="bfloat16")
    assert ours.embed_tokens[...].dtype == jnp.bfloat16
    out = jax_logits(ours, IDS)
    err_ours, err_hf = np.abs(out - ref32).max(), np.abs(ref16 - ref32).max()
    assert err_ours <= 1e-2, err_ours
    assert np.abs(out - ref16).max() <= 1e-2
    assert err_ours <= 2 * err_hf, (err_ours, err_hf)


def _torch_grads(hf, ids):
    hf.zero_grad()
    logits = hf(input_ids=torch.as_tensor(ids)).logits
    v = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), torch.as_tensor(ids)[:, 1:].reshape(-1))
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().numpy().copy() for n, p in hf.named_parameters()}


def test_ce_gradients_match_torch(pair):
    name, hf, path = pair
    ours = from_pretrained(path)
    ids = jnp.asarray(IDS, jnp.int32)

    def loss_fn(model):
        logits = model(ids)
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()

    loss, grads = nnx.jit(nnx.value_and_grad(loss_fn))(ours)
    t_loss, t_grads = _torch_grads(hf, IDS)
    assert abs(float(loss) - t_loss) <= 1e-5
    pairs = {
        "model.embed_tokens.weight": (grads.embed_tokens[...], False),
        "model.layers.0.self_attn.q_proj.weight": (grads.layers[0].self_attn.q_proj.kernel[...], True),
        "model.layers.1.mlp.down_proj.weight": (grads.layers[1].mlp.down_proj.kernel[...], True),
        "model.layers.0.input_layernorm.weight": (grads.layers[0].input_layernorm.weight[...], False),
    }
    if not hf.config.tie_word_embeddings:
        pairs["lm_head.weight"] = (grads.lm_head.kernel[...], True)
    if "model.layers.1.self_attn.k_proj.bias" in t_grads:
        pairs["model.layers.1.self_attn.k_proj.bias"] = (grads.layers[1].self_attn.k_proj.bias[...], False)
    for key, (g, transpose) in pairs.items():
        g = np.asarray(g)
        g = g.T if transpose else g
        ref = t_grads[key]
        rel = np.abs(g - ref).max() / np.abs(ref).max()
        assert rel <= 1e-4, (key, rel)


def _pad(seqs, side):
    t = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), t), np.int64)
    mask = np.zeros((len(seqs), t), bool)
    for i, s in enumerate(seqs):
        sl = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        ids[i, sl], mask[i, sl] = s, True
    return ids, mask


def test_padded_batch_equals_unpadded_sequences(pair):
    """Left- and right-padded batches give, at real positions, the logits of each sequence alone (and HF's)."""
    _, hf, path = pair
    ours = from_pretrained(path)
    rng = np.random.RandomState(1)
    seqs = [rng.randint(1, 128, n) for n in (11, 4, 8)]
    singles = [jax_logits(ours, s[None])[0] for s in seqs]
    for i, s in enumerate(seqs):
        assert np.abs(singles[i] - hf_logits(hf, s[None])[0]).max() <= 1e-4
    for side in ("left", "right"):
        ids, mask = _pad(seqs, side)
        batch = jax_logits(ours, ids, mask)
        for i in range(len(seqs)):
            assert np.abs(batch[i][mask[i]] - singles[i]).max() <= 1e-5, (side, i)
