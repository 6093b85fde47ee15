"""LoRA adapters (models.lora / adapters / lora_io) against transformers + peft on tiny Llama and Qwen2 (fp32, CPU).

Same base weights (our ``from_pretrained`` of the HF-saved base), same non-zero adapters (peft's kaiming-uniform A,
B drawn at random: the adapters move the logits by 0.5-0.6). Tolerances: logits max |diff| <= 1e-4 (measured
2.4e-7 in every comparison); gradients of a summed token log-prob w.r.t. every adapter matrix max |diff| <= 1e-5
(measured 8.3e-7 / 1.2e-6, gradients up to 3.2 / 3.8).
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import peft
import torch
import transformers

from rewardsql_jax.models import (
    LoRAConfig,
    LoRAParam,
    add_adapters,
    from_pretrained,
    has_adapters,
    load_adapters,
    merge_adapters,
    save_adapters,
    save_pretrained,
    without_adapters,
)
from rewardsql_jax.models.lora import TARGETS
from rewardsql_jax.models.lora_io import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from rewardsql_jax.sampling import generate, sampler

from _hf_tiny import hf_logits, jax_logits, make_hf_model, save_hf_model

pytestmark = pytest.mark.parity

CASES = {  # family, HF overrides, LoRAConfig
    "llama-all-seven": ("llama", dict(), LoRAConfig(rank=4, alpha=8.0, targets=TARGETS)),
    "qwen2-tied-q-v-gate-down": (
        "qwen2",
        dict(tie_word_embeddings=True),
        LoRAConfig(rank=2, alpha=16.0, targets=("q", "v", "gate", "down")),
    ),
}
IDS = np.random.RandomState(0).randint(0, 128, (2, 16)).astype(np.int64)
MASK = np.ones(IDS.shape, np.int64)
MASK[1, :3] = 0  # a left-padded row


def _peft_model(hf_base, lora: LoRAConfig, seed: int):
    """peft's LoRA model over a copy of ``hf_base``, every B drawn N(0, 0.05^2) (peft starts them at zero)."""
    config = peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=0.0, target_modules=[f"{t}_proj" for t in lora.targets]
    )
    model = peft.get_peft_model(copy.deepcopy(hf_base), config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn_like(p))
    return model.eval()


def _lora_modules(model):
    """``(HF module name, our LoRA module)`` of every adapter of our model."""
    for i, layer in enumerate(model.layers):
        for block, names in (("self_attn", ("q", "k", "v", "o")), ("mlp", ("gate", "up", "down"))):
            for t in names:
                lora = getattr(getattr(layer, block), f"{t}_proj").lora
                if lora is not None:
                    yield f"model.layers.{i}.{block}.{t}_proj", lora


def _set_from_peft(model, peft_model):
    """Copy peft's adapter weights into ours (``[r, d_in]`` / ``[d_out, r]`` -> ``A [d_in, r]`` / ``B [r, d_out]``)."""
    sd = peft_model.state_dict()
    for name, lora in _lora_modules(model):
        for ours, theirs in ((lora.a, "lora_A"), (lora.b, "lora_B")):
            ours[...] = jnp.asarray(sd[f"base_model.model.{name}.{theirs}.default.weight"].numpy().T)
    return model


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    family, kw, lora = CASES[request.param]
    hf = make_hf_model(family, seed=3, **kw)
    base_dir = save_hf_model(hf, tmp_path_factory.mktemp("base"))
    peft_model = _peft_model(hf, lora, seed=4)
    peft_dir = tmp_path_factory.mktemp("peft")
    peft_model.save_pretrained(str(peft_dir))
    ours = _set_from_peft(add_adapters(from_pretrained(base_dir), lora), peft_model)
    return dict(family=family, hf=hf, base_dir=base_dir, peft=peft_model, peft_dir=peft_dir, ours=ours, lora=lora)


def test_logits_match_peft(case):
    ref = hf_logits(case["peft"], IDS, MASK)
    base = hf_logits(case["hf"], IDS, MASK)
    assert np.abs(ref - base).max() > 0.05  # the adapters matter
    diff = np.abs(jax_logits(case["ours"], IDS, MASK) - ref)[MASK.astype(bool)].max()
    assert diff <= 1e-4, diff


def _summed_logprob_torch(model):
    ids, mask = torch.as_tensor(IDS), torch.as_tensor(MASK)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return (lp * mask[:, :-1] * mask[:, 1:]).sum()  # a padded position's logits are not the model's


def test_adapter_gradients_match_peft(case):
    peft_model, ours = case["peft"], case["ours"]
    peft_model.zero_grad()
    _summed_logprob_torch(peft_model).backward()
    grads = {n: p.grad.numpy() for n, p in peft_model.named_parameters() if p.grad is not None}
    assert all("lora_" in n for n in grads)  # peft trains the adapters alone
    graphdef, adapters, rest = nnx.split(ours, LoRAParam, ...)
    ids, mask = jnp.asarray(IDS, jnp.int32), jnp.asarray(MASK, bool)

    def summed_logprob(a):
        logits = nnx.merge(graphdef, a, rest)(ids, mask)[:, :-1]
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), ids[:, 1:, None], axis=-1)[..., 0]
        return jnp.sum(lp * mask[:, :-1] * mask[:, 1:])

    g = nnx.merge(graphdef, jax.jit(jax.grad(summed_logprob))(adapters), rest)
    compared = 0
    for name, lora in _lora_modules(g):
        for ours_g, theirs in ((lora.a, "lora_A"), (lora.b, "lora_B")):
            ref = grads.pop(f"base_model.model.{name}.{theirs}.default.weight").T
            assert np.abs(ref).max() > 1e-3  # not trivially zero
            diff = np.abs(np.asarray(ours_g[...]) - ref).max()
            assert diff <= 1e-5, (name, theirs, diff)
            compared += 1
    assert compared and not grads  # every adapter of peft's has its counterpart here


def test_zero_b_gives_the_base_logits(case):
    base = from_pretrained(case["base_dir"])
    fresh = add_adapters(base, case["lora"], seed=7)
    assert all(float(jnp.abs(lora.b[...]).max()) == 0.0 for _, lora in _lora_modules(fresh))
    assert float(jnp.abs(fresh.layers[0].self_attn.v_proj.lora.a[...]).max()) > 0.0
    np.testing.assert_array_equal(jax_logits(fresh, IDS, MASK), jax_logits(base, IDS, MASK))


def test_without_adapters_is_the_base(case):
    base = hf_logits(case["hf"], IDS, MASK)
    off = without_adapters(case["ours"])
    assert not has_adapters(off) and has_adapters(case["ours"])
    assert np.abs(jax_logits(off, IDS, MASK) - base)[MASK.astype(bool)].max() <= 1e-4


def test_saved_adapters_load_in_peft(case, tmp_path):
    save_adapters(case["ours"], tmp_path, base_model_name_or_path=case["base_dir"])
    assert {p.name for p in tmp_path.iterdir()} == {ADAPTER_CONFIG, ADAPTER_WEIGHTS}
    loaded = peft.PeftModel.from_pretrained(copy.deepcopy(case["hf"]), str(tmp_path)).eval()
    assert loaded.peft_config["default"].r == case["lora"].rank
    assert set(loaded.peft_config["default"].target_modules) == {f"{t}_proj" for t in case["lora"].targets}
    diff = np.abs(hf_logits(loaded, IDS, MASK) - jax_logits(case["ours"], IDS, MASK))[MASK.astype(bool)].max()
    assert diff <= 1e-4, diff


def test_peft_saved_adapters_load_here(case):
    loaded = load_adapters(from_pretrained(case["base_dir"]), case["peft_dir"])
    assert loaded.config.lora == case["lora"]
    for (_, a), (_, b) in zip(_lora_modules(loaded), _lora_modules(case["ours"])):
        np.testing.assert_array_equal(np.asarray(a.a[...]), np.asarray(b.a[...]))
        np.testing.assert_array_equal(np.asarray(a.b[...]), np.asarray(b.b[...]))
    diff = np.abs(jax_logits(loaded, IDS, MASK) - hf_logits(case["peft"], IDS, MASK))[MASK.astype(bool)].max()
    assert diff <= 1e-4, diff
    again = load_adapters(add_adapters(from_pretrained(case["base_dir"]), case["lora"]), case["peft_dir"])
    np.testing.assert_array_equal(jax_logits(again, IDS, MASK), jax_logits(loaded, IDS, MASK))


def test_merged_save_pretrained_loads_in_transformers(case, tmp_path):
    save_pretrained(case["ours"], tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    ref = hf_logits(case["peft"], IDS, MASK)
    assert np.abs(hf_logits(hf, IDS, MASK) - ref)[MASK.astype(bool)].max() <= 1e-4
    ours = from_pretrained(tmp_path)
    assert not has_adapters(ours)
    assert np.abs(jax_logits(ours, IDS, MASK) - ref)[MASK.astype(bool)].max() <= 1e-4


@pytest.mark.parametrize("shared", [False, True], ids=["own-prompts", "shared-prefix"])
def test_greedy_sampling_with_adapters_equals_the_merged_model(case, shared):
    """The KV-cache sampler (prefill, decode; with a 40-token common prefix, ``prefill_shared``) runs base + adapters
    as they are and draws the merged model's greedy tokens."""
    head = list(range(40, 80)) if shared else []
    prompts = [head + [3, 17, 42, 5, 9], head + list(range(20, 31)), head + [101]]
    traced = sampler.TRACE_COUNTS["prefill_shared"]
    with_adapters = generate(case["ours"], prompts, max_new_tokens=6)
    assert (sampler.TRACE_COUNTS["prefill_shared"] > traced) == shared
    merged = generate(merge_adapters(case["ours"]), prompts, max_new_tokens=6)
    base = generate(without_adapters(case["ours"]), prompts, max_new_tokens=6)
    np.testing.assert_array_equal(np.asarray(with_adapters.tokens), np.asarray(merged.tokens))
    np.testing.assert_allclose(np.asarray(with_adapters.logprobs), np.asarray(merged.logprobs), atol=1e-5)
    assert not np.array_equal(np.asarray(with_adapters.tokens), np.asarray(base.tokens))  # the adapters steer it


def test_load_adapters_errors(case, tmp_path):
    base = from_pretrained(case["base_dir"])
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        (tmp_path / ADAPTER_CONFIG).write_text("{}")
        load_adapters(base, tmp_path)
    lora = case["lora"]
    other_rank = add_adapters(base, LoRAConfig(rank=lora.rank + 1, alpha=lora.alpha, targets=lora.targets))
    with pytest.raises(ValueError, match="rank: model"):
        load_adapters(other_rank, case["peft_dir"])
    other_targets = add_adapters(base, LoRAConfig(rank=lora.rank, alpha=lora.alpha, targets=("k",)))
    with pytest.raises(ValueError, match="targets: model"):
        load_adapters(other_targets, case["peft_dir"])
    smaller = make_hf_model(case["family"], hidden_size=32, intermediate_size=64)  # same names, other shapes
    wrong = peft.get_peft_model(smaller, peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=["q_proj"]))
    wrong.save_pretrained(str(tmp_path / "small"))
    q_only = add_adapters(base, LoRAConfig(rank=lora.rank, alpha=lora.alpha, targets=("q",)))
    with pytest.raises(ValueError, match="shape mismatch"):
        load_adapters(q_only, tmp_path / "small")
