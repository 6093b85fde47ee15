"""The device mesh of SQLConductor's trainers (the action model's and the policy's SFT, curriculum GRPO; Sec. 4.4).

The models are small: each process trains its own copy on a mesh of its own devices (``jax.local_devices()``), so
a multi-process launch computes the same run on every process, as the pipeline's ``run.py`` expects. ``mesh`` is
the pipeline's ``MeshConfig``; all axes 1 (the conductor's default) or a single device means no mesh.
"""

from __future__ import annotations

import jax

from rewardsql_jax.models.sharding import make_mesh


def local_mesh(mesh_cfg):
    """The mesh of ``mesh_cfg`` over this process's devices, or None (one device, or every axis 1)."""
    devices = jax.local_devices()
    if len(devices) == 1 or (mesh_cfg.data, mesh_cfg.fsdp, mesh_cfg.tensor) == (1, 1, 1):
        return None
    return make_mesh(data=mesh_cfg.data, fsdp=mesh_cfg.fsdp, tensor=mesh_cfg.tensor, devices=devices)


def check_batches(cfg, mesh) -> None:
    """Every micro-batch of the three trainers splits evenly over the mesh's data x fsdp devices (checked before
    anything trains; ``ValueError`` names the setting to change)."""
    if mesh is None:
        return
    shards, m = mesh.shape["data"] * mesh.shape["fsdp"], cfg.mesh.micro_batches
    for key, rows in (
        ("action.batch_size", cfg.action.batch_size),
        ("policy.batch_size", cfg.policy.batch_size),
        ("rl.group_size", cfg.rl.group_size),
    ):
        if (rows // m) % shards:
            raise ValueError(
                f"{key}={rows} / mesh.micro_batches={m} = {rows // m} rows per micro-batch do not "
                f"split over the mesh's data x fsdp = {shards} devices; make it a multiple of {shards}"
            )
