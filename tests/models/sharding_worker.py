"""Run by tests/models/test_sharding.py in a fresh process with 8 simulated CPU devices.

XLA_FLAGS must be set before jax is imported, which a pytest process that already imported jax cannot
do; so the checks run here and print one JSON report on stdout.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json
import sys
import tempfile

import jax
import numpy as np
from flax import nnx

from rewardsql_jax.models import ModelConfig, build_model, from_pretrained, save_pretrained
from rewardsql_jax.models.sharding import batch_sharding, make_mesh, param_shardings, shard_model

MESHES = {
    "d2f2t2": dict(data=2, fsdp=2, tensor=2),
    "f8": dict(data=1, fsdp=8, tensor=1),
    "d2t4": dict(data=2, fsdp=1, tensor=4),
}


def _spec(x):
    return [list(a) if isinstance(a, tuple) else a for a in x.sharding.spec]


def _shard_shape(x):
    return list(x.addressable_shards[0].data.shape)


def _jit_forward(graphdef):
    """The jitted forward of the model split into ``graphdef`` and the state it is called with."""
    return jax.jit(lambda state, ids, mask: nnx.merge(graphdef, state)(ids, mask))


def main():
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=130,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        attention_bias=True,
        tie_word_embeddings=False,
    )
    ref_model = build_model(cfg, seed=3)
    ckpt = tempfile.mkdtemp()
    save_pretrained(ref_model, ckpt)

    rng = np.random.RandomState(0)
    ids = rng.randint(0, cfg.vocab_size, (8, 12)).astype(np.int32)
    mask = np.ones_like(ids, dtype=bool)
    mask[1, :3] = False  # left padded
    mask[2, -4:] = False  # right padded
    jit_forward = nnx.jit(lambda m, i, k: m(i, k))
    ref = np.asarray(jit_forward(ref_model, ids, mask))

    report = {"n_devices": jax.device_count(), "meshes": {}}
    for name, axes in MESHES.items():
        mesh = make_mesh(**axes)
        model = from_pretrained(ckpt, mesh=mesh)
        graphdef, state = nnx.split(model)
        shardings = param_shardings(state, mesh)

        fwd = _jit_forward(graphdef)
        bs = batch_sharding(mesh)
        out = fwd(state, jax.device_put(ids, bs), jax.device_put(mask, bs))
        # jit with explicit in/out shardings from param_shardings (what the training step does)
        ident = jax.jit(
            lambda s: jax.tree.map(lambda x: x * 1.0, s), in_shardings=(shardings,), out_shardings=shardings
        )
        state2 = ident(state)
        moved = shard_model(build_model(cfg, seed=3), mesh)
        layer = model.layers[0]
        report["meshes"][name] = {
            "max_abs_diff": float(np.abs(np.asarray(out) - ref).max()),
            "q_spec": _spec(layer.self_attn.q_proj.kernel[...]),
            "q_shape": list(layer.self_attn.q_proj.kernel[...].shape),
            "q_shard_shape": _shard_shape(layer.self_attn.q_proj.kernel[...]),
            "k_spec": _spec(layer.self_attn.k_proj.kernel[...]),
            "embed_spec": _spec(model.embed_tokens[...]),
            "embed_shard_shape": _shard_shape(model.embed_tokens[...]),
            "lm_head_spec": _spec(model.lm_head.kernel[...]),
            "down_spec": _spec(layer.mlp.down_proj.kernel[...]),
            "down_shard_shape": _shard_shape(layer.mlp.down_proj.kernel[...]),
            "norm_spec": _spec(layer.input_layernorm.weight[...]),
            "jit_roundtrip_q_spec": _spec(state2["layers"][0]["self_attn"]["q_proj"]["kernel"][...]),
            "shard_model_q_spec": _spec(moved.layers[0].self_attn.q_proj.kernel[...]),
            "shard_model_max_abs_diff": float(np.abs(np.asarray(jit_forward(moved, ids, mask)) - ref).max()),
            "out_spec": _spec(out),
        }
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
