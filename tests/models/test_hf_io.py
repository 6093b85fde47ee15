"""HF checkpoint I/O: save_pretrained -> transformers loads the same model; sharded checkpoints; bad input errors."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
import transformers
from safetensors.numpy import load_file, save_file

from rewardsql_jax.models import ModelConfig, build_model, from_pretrained, save_pretrained
from rewardsql_jax.models.hf import MissingTensorError

from _hf_tiny import hf_logits, jax_logits, make_hf_model, save_hf_model

IDS = np.random.RandomState(0).randint(0, 128, (2, 9)).astype(np.int32)


def _cfg(**kw):
    base = dict(
        model_type="qwen2",
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
    )
    base.update(kw)
    return ModelConfig(**base)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(tie_word_embeddings=True, rope_theta=1e6),
        dict(model_type="llama", attention_bias=False, num_key_value_heads=1),
        dict(model_type="llama", attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    ],
)
def test_save_pretrained_loads_in_transformers_with_same_logits(tmp_path, kw):
    model = build_model(_cfg(**kw), seed=1)
    save_pretrained(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    assert hf.config.model_type == model.config.model_type
    ours = jax_logits(model, IDS)
    assert np.abs(hf_logits(hf, IDS) - ours).max() <= 1e-5
    assert set(json.loads((tmp_path / "config.json").read_text())) >= {"model_type", "architectures", "rope_theta"}


def test_roundtrip_preserves_config_and_weights(tmp_path):
    model = build_model(_cfg(tie_word_embeddings=True, rope_theta=1e6, eos_token_id=(3, 4)), seed=2)
    save_pretrained(model, tmp_path)
    back = from_pretrained(tmp_path)
    assert back.config == model.config
    np.testing.assert_array_equal(np.asarray(back.embed_tokens[...]), np.asarray(model.embed_tokens[...]))
    np.testing.assert_array_equal(jax_logits(back, IDS), jax_logits(model, IDS))


def test_save_sharded_with_index_and_load_back(tmp_path):
    model = build_model(_cfg(), seed=3)
    save_pretrained(model, tmp_path, max_shard_size="20KB")
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(files) > 2 and set(index["weight_map"].values()) == set(files)
    assert "model.safetensors" not in files
    np.testing.assert_array_equal(jax_logits(from_pretrained(tmp_path), IDS), jax_logits(model, IDS))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    assert np.abs(hf_logits(hf, IDS) - jax_logits(model, IDS)).max() <= 1e-5


def test_loads_checkpoint_sharded_by_transformers(tmp_path):
    hf = make_hf_model("qwen2")
    hf.save_pretrained(str(tmp_path), max_shard_size="50KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert np.abs(jax_logits(from_pretrained(tmp_path), IDS) - hf_logits(hf, IDS)).max() <= 1e-4


def test_bf16_checkpoint_loads_exactly(tmp_path):
    hf = make_hf_model("llama").to(torch.bfloat16)
    save_hf_model(hf, tmp_path)
    assert "BF16" in (tmp_path / "model.safetensors").read_bytes()[:4096].decode("latin1")
    ours32 = from_pretrained(tmp_path, dtype="float32")
    ours16 = from_pretrained(tmp_path, dtype="bfloat16")
    ref = hf.model.layers[0].self_attn.q_proj.weight.detach().float().numpy().T
    np.testing.assert_array_equal(np.asarray(ours32.layers[0].self_attn.q_proj.kernel[...]), ref)
    assert ours16.layers[0].self_attn.q_proj.kernel[...].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(ours16.layers[0].self_attn.q_proj.kernel[...].astype(jnp.float32)), ref)


def test_save_in_bf16_dtype(tmp_path):
    model = build_model(_cfg(), seed=4)
    save_pretrained(model, tmp_path, dtype="bfloat16")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert hf.model.embed_tokens.weight.dtype == torch.bfloat16
    back = from_pretrained(tmp_path)
    expect = np.asarray(model.embed_tokens[...].astype(jnp.bfloat16).astype(jnp.float32))
    np.testing.assert_array_equal(np.asarray(back.embed_tokens[...]), expect)


def test_compute_dtype_separate_from_param_dtype(tmp_path):
    save_pretrained(build_model(_cfg(), seed=5), tmp_path)
    m = from_pretrained(tmp_path, dtype="float32", compute_dtype="bfloat16")
    assert m.embed_tokens[...].dtype == jnp.float32 and m.config.compute_dtype == jnp.bfloat16


# ---- bad input -> one clear error ----


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt"
    save_pretrained(build_model(_cfg(), seed=6), d)
    return d


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_pretrained(tmp_path / "nope")


def test_missing_config_json(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        from_pretrained(ckpt)


def test_unsupported_model_type(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported model_type 'gpt2'"):
        from_pretrained(ckpt)


def test_no_safetensors_files(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        from_pretrained(ckpt)


def test_missing_tensor_names_key_and_file(ckpt):
    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(MissingTensorError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight.*model\.safetensors"):
        from_pretrained(ckpt)


def test_shape_mismatch(ckpt):
    tensors = load_file(str(ckpt / "model.safetensors"))
    tensors["model.norm.weight"] = np.ones(31, np.float32)
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"shape mismatch for 'model\.norm\.weight'.*\(31,\).*\(32,\)"):
        from_pretrained(ckpt)


def test_unexpected_tensor_error_or_warning(ckpt):
    tensors = load_file(str(ckpt / "model.safetensors"))
    tensors["model.layers.0.self_attn.o_proj.bias"] = np.zeros(32, np.float32)
    tensors["model.rotary_emb.inv_freq"] = np.zeros(4, np.float32)  # weight-free buffer: ignored silently
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="o_proj.bias"):
        from_pretrained(ckpt)
    with pytest.warns(UserWarning, match="o_proj.bias"):
        from_pretrained(ckpt, strict=False)


def test_tied_checkpoint_with_redundant_lm_head_warns(tmp_path):
    model = build_model(_cfg(tie_word_embeddings=True), seed=10)
    save_pretrained(model, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["lm_head.weight"] = np.zeros((128, 32), np.float32)  # must be ignored: tied model uses embed_tokens
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.warns(UserWarning, match="tie_word_embeddings"):
        back = from_pretrained(tmp_path)
    np.testing.assert_array_equal(jax_logits(back, IDS), jax_logits(model, IDS))


def test_index_pointing_to_missing_shard(tmp_path):
    save_pretrained(build_model(_cfg(), seed=7), tmp_path, max_shard_size="20KB")
    victim = sorted(tmp_path.glob("model-*.safetensors"))[0]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        from_pretrained(tmp_path)


def test_bad_max_shard_size(tmp_path):
    with pytest.raises(ValueError, match="max_shard_size"):
        save_pretrained(build_model(_cfg(), seed=8), tmp_path, max_shard_size="lots")


def test_save_overwrites_stale_shards(tmp_path):
    model = build_model(_cfg(), seed=9)
    save_pretrained(model, tmp_path, max_shard_size="20KB")
    save_pretrained(model, tmp_path)
    assert [p.name for p in tmp_path.glob("*.safetensors")] == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()
