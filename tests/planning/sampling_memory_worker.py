"""Run on 8 simulated CPU devices (``test_sampling_memory.py``): a small model sharded over an fsdp local mesh, its
real weights and sampler caches per device beside the analytic counts, printed as one JSON line."""

import dataclasses
import json
import math
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rewardsql_jax.models.config import ModelConfig  # noqa: E402
from rewardsql_jax.models.registry import build_model  # noqa: E402
from rewardsql_jax.models.sharding import activation_sharding, shard_model  # noqa: E402
from rewardsql_jax.planning.sampling_memory import (  # noqa: E402
    forward_activation_bytes,
    host_sampling_mesh,
    sampler_cache_bytes,
    weight_bytes,
)
from rewardsql_jax.sampling import sampler  # noqa: E402
from rewardsql_jax.sampling.inputs import pad_prompts  # noqa: E402
from rewardsql_jax.sampling.sampler import SamplerOptions, pad_to_mesh  # noqa: E402


def long_prefill() -> dict:
    """Compiled temp bytes of a prefill of 16 prompts of 512 tokens (activations dominate) and the bound."""
    rows, width = 16, 512
    ids = jax.device_put(np.ones((rows, width), np.int32), activation_sharding(("batch", "seq"), mesh))
    mask = jax.device_put(np.ones((rows, width), bool), activation_sharding(("batch", "seq"), mesh))
    lengths = jax.device_put(np.full((rows,), width, np.int32), activation_sharding(("batch",), mesh))
    opts = SamplerOptions(greedy=False, top_k=0, use_top_p=False, cache_len=width + 16, gen_capacity=16, mesh=mesh)
    lowered = sampler.prefill.lower(graphdef, state, ids, mask, lengths, jax.random.key(0), *scalars, opts=opts)
    temp = lowered.compile().memory_analysis().temp_size_in_bytes
    return {"temp": int(temp), "bound": forward_activation_bytes(cfg, rows=rows, seq=width, logits_rows=rows)}


def sampler_inputs(prompts, *, samples: int, new_tokens: int, mesh, model_cfg, top_p: bool = False):
    """``(ids, mask, lengths)`` of ``prompts`` padded and laid out over ``mesh`` and the options of a sampled call of
    ``samples`` samples, as ``generate`` makes them."""
    b = pad_prompts(
        prompts,
        num_samples=samples,
        pad_id=0,
        max_new_tokens=new_tokens,
        max_cache_len=None,
        max_positions=model_cfg.max_position_embeddings,
        vocab_size=model_cfg.vocab_size,
    )
    arrays, n = pad_to_mesh((b.ids, b.mask, b.lengths), mesh)
    opts = SamplerOptions(
        greedy=False,
        top_k=0,
        use_top_p=top_p,
        cache_len=b.cache_len,
        gen_capacity=b.gen_capacity,
        num_samples=samples,
        real_prompts=n if n != len(arrays[0]) else None,
        mesh=mesh,
    )
    return arrays, opts


STATE_FIELDS = ("prompt_cache", "cache", "prompt_mask", "lengths", "tokens", "logprobs", "done")


def shard_shapes(st) -> dict:
    """``{field: [device 0's shard shape of each of its arrays]}`` of a ``DecodeState``."""
    return {
        f: [list(x.addressable_shards[0].data.shape) for x in jax.tree.leaves(getattr(st, f))] for f in STATE_FIELDS
    }


def sharded_cache() -> dict:
    """A tiny fp32 model on a data x fsdp mesh (2 x 4) and on fsdp=8, 4 prompts x 4 samples (16 rows, the prompts
    padded to 8): the shard shapes of the caches and per-row arrays that prefill and the decode loop return (and,
    as a control, prefill's without the mesh in its options), and the tokens ``generate`` samples against the
    unsharded model's with the same seed."""
    from rewardsql_jax.models.sharding import make_mesh
    from rewardsql_jax.sampling import generate

    small = cfg.replace(dtype="float32", param_dtype="float32")
    prompts = [[5, 9, 17, 3], [8, 2], [40, 41, 42, 43, 44, 45], [7, 7, 7]]
    args = dict(max_new_tokens=12, temperature=1.0, top_p=0.9, num_samples=4, seed=3, eos_token_id=11)
    ref = generate(build_model(small, seed=1), prompts, **args)
    out = {}
    for name, axes in {"d2f4": (2, 4, 1), "f8": (1, 8, 1)}.items():
        m = make_mesh(*axes)
        model = shard_model(build_model(small, seed=1), m)
        g, s = nnx.split(model)
        inputs, o = sampler_inputs(prompts, samples=4, new_tokens=12, mesh=m, model_cfg=small, top_p=True)
        st = sampler.prefill(g, s, *inputs, jax.random.key(0), *scalars, opts=o)
        no_mesh = sampler.prefill(g, s, *inputs, jax.random.key(0), *scalars, opts=dataclasses.replace(o, mesh=None))
        got = generate(model, prompts, **args)
        out[name] = {
            "prefill": shard_shapes(st),
            "decode": shard_shapes(sampler.decode_loop(g, s, st, jnp.int32(12), *scalars, opts=o)),
            "control_cache": shard_shapes(no_mesh)["cache"],
            "full_cache": list(no_mesh.cache.k[0].shape),
            "same_tokens": ref.tokens == got.tokens,
            "max_logprob_diff": max(abs(x - y) for a, c in zip(ref.logprobs, got.logprobs) for x, y in zip(a, c)),
        }
    return out


def per_device(tree) -> int:
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))


cfg = ModelConfig(
    model_type="qwen2",
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    attention_bias=True,
    dtype="bfloat16",
    param_dtype="bfloat16",
)
mesh = host_sampling_mesh(8)
model = shard_model(build_model(cfg), mesh)
graphdef, state = nnx.split(model)
PROMPTS, SAMPLES, PROMPT_LEN, NEW = 6, 4, 40, 20  # 6 prompts pad to 8 rows; 40 -> 64 slots; 20 -> 32 slots
(ids, mask, lengths), opts = sampler_inputs(
    [[1] * PROMPT_LEN] * PROMPTS, samples=SAMPLES, new_tokens=NEW, mesh=mesh, model_cfg=cfg
)
scalars = (jnp.float32(1.0), jnp.float32(1.0), jnp.full((4,), -1, jnp.int32), jnp.int32(0))
lowered = sampler.prefill.lower(graphdef, state, ids, mask, lengths, jax.random.key(0), *scalars, opts=opts)
st = sampler.prefill(graphdef, state, ids, mask, lengths, jax.random.key(0), *scalars, opts=opts)
after_prefill = per_device((st.prompt_cache, st.cache))
gen_after_prefill = per_device(st.cache)
st = sampler.decode_loop(graphdef, state, st, jnp.int32(NEW), *scalars, opts=opts)
gen_after_decode = per_device(st.cache)
prompt_cache = per_device(st.prompt_cache)
prefill_temp = lowered.compile().memory_analysis().temp_size_in_bytes
print(
    "SAMPLING_JSON "
    + json.dumps(
        dict(
            weights_real=per_device(state),
            weights=weight_bytes(cfg, mesh),
            full_weights=sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(state)),
            prompt_cache=prompt_cache,
            gen_after_prefill=gen_after_prefill,
            gen_after_decode=gen_after_decode,
            cache=sampler_cache_bytes(
                cfg, mesh, prompts=PROMPTS, samples=SAMPLES, prompt_len=PROMPT_LEN, new_tokens=NEW
            ),
            activations=forward_activation_bytes(cfg, rows=PROMPTS, seq=ids.shape[1], logits_rows=PROMPTS * SAMPLES),
            prefill_temp=int(prefill_temp),
            long=long_prefill(),
            sharded=sharded_cache(),
        )
    )
)
