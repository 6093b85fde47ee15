"""The kernels lower for GPU (Triton) and TPU (Mosaic) from a CPU-only machine.

Interpret mode checks the numerics but not the hardware constraints (block shapes, layouts, ops a
backend lacks). Cross-platform lowering (``.lower(lowering_platforms=...)``) runs the Pallas
Triton/Mosaic lowering in Python, which rejects such kernels, without needing the device. Final
compilation (PTX / libtpu) is not covered; ``benchmarks/kernel_speed.py`` checks compiled kernels
against the reference on a real device.
"""

import functools

import jax
import jax.numpy as jnp
import pytest

from rewardsql_jax.kernels.decode_attention import decode_attention
from rewardsql_jax.kernels.flash_attention import flash_attention
from rewardsql_jax.kernels.prefix_decode import prefix_decode_attention

# (B, T, H, Hkv, D): an odd length (padding path) with Qwen-0.5B-like heads, and a 7B-like layout.
SHAPES = [(2, 200, 14, 2, 64), (1, 256, 28, 4, 128)]


def _lowered_text(fn, shape, dtype, platform):
    b, t, h, hkv, d = shape
    args = (
        jax.ShapeDtypeStruct((b, t, h, d), dtype),
        jax.ShapeDtypeStruct((b, t, hkv, d), dtype),
        jax.ShapeDtypeStruct((b, t, hkv, d), dtype),
        jax.ShapeDtypeStruct((b,), jnp.int32),
    )
    return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def _functions(backend):
    flash = functools.partial(flash_attention, block_q=64, block_k=64, backend=backend)

    def fwd(q, k, v, lengths):
        return flash(q, k, v, kv_lengths=lengths)

    def grads(q, k, v, lengths):
        return jax.grad(lambda *a: jnp.sum(flash(*a, kv_lengths=lengths).astype(jnp.float32)), argnums=(0, 1, 2))(
            q, k, v
        )

    def decode(q, k, v, lengths):
        return decode_attention(q[:, 0], k, v, lengths=lengths, block_k=64, num_splits=2, backend=backend)

    def prefix_decode(q, k, v, lengths):
        """Two rows per prompt (q's first two positions), the prompt caches heads-first, own caches of length T."""
        b, t, h, d = q.shape

        def heads_first(x):
            return jnp.repeat(x.swapaxes(1, 2), 2, axis=0)

        own_mask = jnp.arange(t)[None, :] < jnp.repeat(lengths, 2)[:, None]
        kernel = functools.partial(decode_attention, block_k=64, num_splits=2, backend=backend)
        return prefix_decode_attention(
            q[:, :2].reshape(2 * b, h, d),
            heads_first(k),
            heads_first(v),
            own_mask,
            prefix_k=k.swapaxes(1, 2),
            prefix_v=v.swapaxes(1, 2),
            prefix_mask=jnp.arange(t)[None, :] < lengths[:, None],
            decode=kernel,
        )

    return {
        "flash_fwd": (fwd, 1),
        "flash_grads": (grads, 3),
        "decode": (decode, 1),
        "prefix_decode": (prefix_decode, 2),
    }


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_lowers_to_triton(shape, dtype):
    for name, (fn, n_kernels) in _functions("gpu").items():
        text = _lowered_text(fn, shape, dtype, "cuda")
        assert text.count("__gpu$xla.gpu.triton") == n_kernels, name


@pytest.fixture
def pretend_tpu_chip():
    """Mosaic lowering asks the default device for its TPU generation; describe the CPU as a v5p."""
    tpu_info = pytest.importorskip("jax._src.pallas.mosaic.tpu_info")
    if not hasattr(tpu_info, "registry") or not hasattr(tpu_info, "get_tpu_info_for_chip"):
        pytest.skip("this jax has no TPU-info registry to describe a chip for cross-lowering")
    tpu_info.registry["cpu"] = lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5P, 1)
    tpu_info.get_tpu_info.cache_clear() if hasattr(tpu_info.get_tpu_info, "cache_clear") else None
    yield
    tpu_info.registry.pop("cpu", None)


@pytest.mark.parametrize("shape", SHAPES)
def test_lowers_to_mosaic(shape, pretend_tpu_chip):
    for name, (fn, n_kernels) in _functions("tpu").items():
        text = _lowered_text(fn, shape, jnp.bfloat16, "tpu")
        assert text.count("tpu_custom_call") == n_kernels, name
