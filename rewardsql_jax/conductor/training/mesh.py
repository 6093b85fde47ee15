"""The device mesh of SQLConductor's trainers (the action model's and the policy's SFT, curriculum GRPO; Sec. 4.4).

The models are small: each process trains its own copy on a mesh of its own devices (``jax.local_devices()``), so
a multi-process launch computes the same run on every process, as the pipeline's ``run.py`` expects. ``mesh`` is
the pipeline's ``MeshConfig``; all axes 1 (the conductor's default) or a single device means no mesh.
"""

from __future__ import annotations

import jax

from rewardsql_jax.models.sharding import make_mesh


def trainer_mesh(mesh_cfg):
    """The mesh of ``mesh_cfg`` over this process's devices, or None (one device, or every axis 1)."""
    devices = jax.local_devices()
    if len(devices) == 1 or (mesh_cfg.data, mesh_cfg.fsdp, mesh_cfg.tensor) == (1, 1, 1):
        return None
    return make_mesh(data=mesh_cfg.data, fsdp=mesh_cfg.fsdp, tensor=mesh_cfg.tensor, devices=devices)
