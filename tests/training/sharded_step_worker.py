"""Run by tests/training/test_sharded_step.py in a fresh process with 8 simulated CPU devices.

XLA_FLAGS must be set before jax is imported, so the comparison runs here and prints one JSON report.
The same two GRPO steps (k3 KL to a frozen reference held in the state) run once on one device with one
micro-batch and once on a data=2 x fsdp=2 x tensor=2 mesh with two micro-batches.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.models.sharding import make_mesh
from rewardsql_jax.training.checkpoint import Checkpointer, restore_latest
from rewardsql_jax.training.sharding import batch_shardings, shard_state
from rewardsql_jax.training.step import loss_and_grads, make_train_step

sys.path.insert(0, str(Path(__file__).parent))
from _train_tiny import rl_batch, tiny_state

OPTS = {"beta": 0.04, "clip_eps": 0.2, "agg": "grpo"}


def first_grads(mesh, micro_batches):
    """Gradient of the first batch, flattened (the step's math without Adam's normalisation)."""
    state = tiny_state(with_reference=True)
    batch = rl_batch(seed=0, with_ref=False)
    if mesh is not None:
        state, batch = shard_state(state, mesh), jax.device_put(batch, batch_shardings(batch, mesh))
    fn = jax.jit(
        lambda p, r, b: loss_and_grads(
            p, r, state.graphdef, b, loss_name="grpo", loss_options=OPTS, micro_batches=micro_batches, mesh=mesh
        )[1]
    )
    return np.concatenate([np.ravel(np.asarray(g)) for g in jax.tree.leaves(fn(state.params, state.ref_params, batch))])


def run(mesh, micro_batches):
    state = tiny_state(with_reference=True)
    if mesh is not None:
        state = shard_state(state, mesh)
    in_shardings = [x.sharding for x in jax.tree.leaves(state)]
    step = make_train_step(state.graphdef, "grpo", OPTS, mesh=mesh, micro_batches=micro_batches)
    losses = []
    for seed in (0, 1):
        state, metrics = step(state, rl_batch(seed=seed, with_ref=False))
        losses.append(float(metrics["loss"]))
    same_sharding = all(x.sharding == s for x, s in zip(jax.tree.leaves(state), in_shardings))
    return state, losses, same_sharding


def main():
    assert jax.device_count() == 8, jax.devices()
    single, single_losses, _ = run(None, 1)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    sharded, sharded_losses, same = run(mesh, 2)
    diffs = [
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params))
    ]
    moved = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(sharded.params), jax.tree.leaves(sharded.ref_params))
    )
    q = sharded.params["layers"][0]["self_attn"]["q_proj"]["kernel"].get_value()
    g_single, g_sharded = first_grads(None, 1), first_grads(mesh, 2)
    with tempfile.TemporaryDirectory() as tmp:  # sharded save -> restore into a fresh sharded state
        ckpt = Checkpointer(tmp)
        ckpt.save(sharded)
        ckpt.wait()
        restored = restore_latest(ckpt, shard_state(tiny_state(seed=3, with_reference=True), mesh))
        ckpt.close()
    restore_exact = all(
        np.array_equal(np.asarray(a), np.asarray(b)) and a.sharding == b.sharding
        for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(sharded))
    )
    print(
        json.dumps(
            {
                "restore_exact": restore_exact,
                "max_grad_diff": float(np.max(np.abs(g_single - g_sharded))),
                "max_grad": float(np.max(np.abs(g_single))),
                "single_losses": single_losses,
                "sharded_losses": sharded_losses,
                "max_param_diff": max(diffs),
                "moved": moved,
                "steps": [int(single.step), int(sharded.step)],
                "out_sharding_kept": same,
                "q_kernel_shard_shape": list(q.addressable_shards[0].data.shape),
                "q_kernel_shape": list(q.shape),
            }
        )
    )


if __name__ == "__main__":
    main()
