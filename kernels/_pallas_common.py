"""Helpers shared by the Pallas attention kernels: backend names, compiler parameters, padding, masks.

Kernels are written once in the "whole-K/V-in-the-ref, loop over KV blocks" style of the Pallas GPU
flash-attention example: each program owns one query block and walks the key/value blocks with a
``fori_loop`` whose bound skips blocks that causality or the sequence length rules out. That style
lowers to Triton (GPU), runs in interpret mode (CPU tests) and to Mosaic (TPU) for sequences whose
K/V for one head fit VMEM (double-buffered: 4 * S * D * itemsize bytes, 8 MiB at S=8192, D=128,
bf16). The Triton and Mosaic lowerings are checked from CPU by tests/kernels/test_kernel_lowering.py.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# Finite stand-in for -inf: keeps ``exp(s - m)`` NaN-free when a whole block is masked. Masked
# probabilities are zeroed explicitly, so the value never leaks into results.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)

BACKENDS = ("tpu", "gpu", "interpret")


def resolve_backend(backend: str | None, interpret: bool) -> str:
    """``"interpret"`` when asked, else the named or default platform mapped to ``tpu``/``gpu``."""
    if interpret:
        return "interpret"
    backend = backend or jax.default_backend()
    backend = {"cuda": "gpu", "rocm": "gpu"}.get(backend, backend)
    if backend not in BACKENDS:
        raise ValueError(f"no Pallas lowering for backend {backend!r}; use interpret=True or the reference")
    return backend


def compiler_params(backend: str, num_grid_dims: int, num_warps: int = 4):
    """Per-backend ``compiler_params`` (``None`` in interpret mode)."""
    if backend == "gpu":
        from jax.experimental.pallas import triton as plgpu

        return plgpu.CompilerParams(num_warps=num_warps, num_stages=2)
    if backend == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        semantics: list[Literal["parallel"]] = ["parallel"] * num_grid_dims
        return pltpu.CompilerParams(dimension_semantics=tuple(semantics))
    return None


def call_kwargs(backend: str, num_grid_dims: int, num_warps: int = 4) -> dict:
    """Keyword arguments of ``pl.pallas_call`` that depend only on the backend (``num_warps``: Triton)."""
    return dict(interpret=backend == "interpret", compiler_params=compiler_params(backend, num_grid_dims, num_warps))


def scalar_spec(backend: str, index_map):
    """BlockSpec of one int32 per grid row (e.g. a sequence length) read as ``ref[0]``.

    On TPU scalars must live in SMEM, so the whole array goes there and the kernel indexes it with
    the program id; elsewhere a one-element block is enough. ``read_scalar`` hides the difference.
    """
    if backend == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.BlockSpec((1,), index_map)


def read_scalar(ref, backend: str, row):
    """Read the scalar that ``scalar_spec`` placed for grid row ``row``."""
    return ref[row] if backend == "tpu" else ref[0]


def pad_axis(x, axis: int, multiple: int, value=0):
    """Pad ``x`` at the end of ``axis`` up to a multiple of ``multiple`` (no copy when aligned)."""
    size = x.shape[axis]
    extra = -size % multiple
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def key_mask_of(batch: int, kv_len: int, kv_lengths=None, key_mask=None):
    """Boolean ``[B, S]`` key mask from per-sequence lengths and/or an explicit mask (both ANDed)."""
    mask = jnp.ones((batch, kv_len), dtype=bool)
    if kv_lengths is not None:
        mask = mask & (jnp.arange(kv_len)[None, :] < jnp.asarray(kv_lengths, jnp.int32)[:, None])
    if key_mask is not None:
        mask = mask & jnp.asarray(key_mask).astype(bool)
    return mask


def kv_block_size(block_k: int, kv_len: int, backend: str) -> int:
    """KV block size: clipped to the (power-of-two padded) length; on TPU a multiple of 128 lanes
    unless one block covers the whole sequence (Mosaic tiles the key mask's lane dimension)."""
    block_k = min(block_k, pl.next_power_of_2(kv_len))
    if backend == "tpu" and block_k % 128 and block_k < kv_len:
        block_k = min(128 * pl.cdiv(block_k, 128), pl.next_power_of_2(kv_len))
    return block_k
