"""Mesh sharding: sharded forward == unsharded forward on 8 simulated CPU devices, and params really sharded.

The 8-device checks run in a subprocess (tests/models/sharding_worker.py) because XLA_FLAGS must be
set before jax is imported. The rule-table checks below run in-process on abstract meshes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from rewardsql_jax.models.sharding import DEFAULT_RULES, AxisRules, logical_to_spec, make_mesh

WORKER = Path(__file__).with_name("sharding_worker.py")


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_worker_sees_eight_devices(report):
    assert report["n_devices"] == 8


@pytest.mark.parametrize("mesh", ["d2f2t2", "f8", "d2t4"])
def test_sharded_forward_matches_unsharded(report, mesh):
    r = report["meshes"][mesh]
    assert r["max_abs_diff"] <= 1e-5
    assert r["shard_model_max_abs_diff"] <= 1e-5


def test_params_really_sharded_2x2x2(report):
    r = report["meshes"]["d2f2t2"]
    assert r["q_spec"] == ["fsdp", "tensor"]
    assert r["q_shard_shape"] == [r["q_shape"][0] // 2, r["q_shape"][1] // 2]
    assert r["embed_spec"] == ["tensor", "fsdp"] and r["embed_shard_shape"] == [65, 32]
    assert r["down_spec"] == ["tensor", "fsdp"] and r["down_shard_shape"] == [64, 32]
    assert r["norm_spec"] == []  # norms replicated
    assert r["jit_roundtrip_q_spec"] == ["fsdp", "tensor"]  # param_shardings usable as jit shardings
    assert r["shard_model_q_spec"] == ["fsdp", "tensor"]


def test_fsdp8_shards_embed_dim(report):
    r = report["meshes"]["f8"]
    assert r["q_shard_shape"] == [8, 64]
    assert r["embed_shard_shape"] == [130, 8]


def test_tensor4_falls_back_to_replication_when_not_divisible(report):
    r = report["meshes"]["d2t4"]
    assert r["q_shard_shape"] == [64, 16]  # 4 heads x 16 split over tensor=4
    # vocab 130 is not divisible by tensor=4: that dim is replicated instead
    assert r["embed_spec"] == [None, "fsdp"] and r["embed_shard_shape"] == [130, 64]
    assert r["lm_head_spec"] == ["fsdp"]


class _FakeMesh:
    def __init__(self, **shape):
        self.shape = shape


def test_logical_to_spec_rules_and_divisibility():
    mesh = _FakeMesh(data=2, fsdp=4, tensor=2)
    assert logical_to_spec(("embed", "q_heads")) == P("fsdp", "tensor")
    assert logical_to_spec(("batch", "seq")) == P(("data", "fsdp"))
    assert logical_to_spec(("batch", "seq"), shape=(8, 3), mesh=mesh) == P(("data", "fsdp"))
    # 6 rows: data (2) divides, data*fsdp (8) does not -> keep only data
    assert logical_to_spec(("batch", "seq"), shape=(6, 3), mesh=mesh) == P("data")
    assert logical_to_spec(("vocab", "embed"), shape=(131, 64), mesh=mesh) == P(None, "fsdp")
    assert logical_to_spec(("norm",)) == P()


def test_mesh_axis_used_once_per_array():
    rules = AxisRules(rules=(("a", "tensor"), ("b", "tensor")))
    assert logical_to_spec(("a", "b"), rules) == P("tensor")


def test_unknown_logical_axis_is_clear_error():
    with pytest.raises(KeyError, match="no sharding rule"):
        logical_to_spec(("nonsense",), DEFAULT_RULES)


def test_make_mesh_sizes_and_errors():
    n = jax.device_count()
    mesh = make_mesh(devices=jax.devices())
    assert mesh.axis_names == ("data", "fsdp", "tensor") and mesh.shape["fsdp"] == n
    with pytest.raises(ValueError, match="devices"):
        make_mesh(data=n + 1, fsdp=1, tensor=1)
    with pytest.raises(ValueError, match="at most one"):
        make_mesh(data=-1, fsdp=-1)
    assert np.prod(list(make_mesh(data=1, fsdp=1, tensor=-1).shape.values())) == n


def test_param_shardings_of_abstract_model():
    from flax import nnx
    from jax.sharding import NamedSharding

    from rewardsql_jax.models import ModelConfig, build_model
    from rewardsql_jax.models.sharding import param_shardings

    cfg = ModelConfig(
        model_type="llama",
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    abstract = nnx.eval_shape(lambda: build_model(cfg))
    shardings = param_shardings(abstract, make_mesh())
    leaves = jax.tree.leaves(shardings)
    assert len(leaves) == len(jax.tree.leaves(nnx.state(abstract))) and all(
        isinstance(s, NamedSharding) for s in leaves
    )
    assert shardings["layers"][0]["self_attn"]["q_proj"]["kernel"].get_value().spec == P("fsdp", "tensor")
