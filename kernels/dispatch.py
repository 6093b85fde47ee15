"""Choose an attention implementation for the current backend.

``attention_impl()`` returns Pallas kernels lowered with Mosaic on TPU and Triton on GPU, and the
pure-jnp references on CPU (Pallas has no compiled CPU lowering). ``interpret=True`` runs the Pallas
kernels in the Pallas interpreter on any backend, which is how the CPU tests exercise them.

All three callables share the semantics of ``kernels.reference``:

* ``flash(q, k, v, *, causal=True, q_offset=0, kv_lengths=None, key_mask=None, scale=None)``: q
  ``[B,T,H,D]``, k/v ``[B,S,Hkv,D]``, differentiable; with ``q_offset=0`` and ``key_mask`` it also
  serves a prefill written at cache slot 0 (``CausalLM.forward_with_cache`` with ``write_index=0``);
* ``decode(q, k_cache, v_cache, *, lengths=None, key_mask=None, scale=None, kv_heads_first=False,
  return_lse=False)``: one query token;
* ``prefix_decode(q, k, v, own_mask, *, prefix_k, prefix_v, prefix_mask)``: one query token per row of
  prompt-sharing rows, prompt caches stored once (``kernels.prefix_decode``; the sampler's decode step);
* ``from_mask(q, k, v, mask)``: same signature as ``models.attention_math.attention`` for the
  ``causal & key_mask`` mask of ``CausalLM.hidden_states`` (rows with no visible key give zeros).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax

from ._pallas_common import resolve_backend
from .decode_attention import decode_attention
from .flash_attention import flash_attention
from .prefix_decode import prefix_decode_attention
from .reference import decode_attention_reference, mha_reference


@dataclasses.dataclass(frozen=True)
class AttentionImpl:
    """A named pair of attention functions (see the module docstring for their signatures)."""

    name: str  # "pallas_tpu" | "pallas_gpu" | "pallas_interpret" | "reference"
    flash: Callable
    decode: Callable

    @property
    def prefix_decode(self) -> Callable:
        """Shared-prompt decode attention built on ``decode`` (see ``kernels.prefix_decode``)."""
        return functools.partial(prefix_decode_attention, decode=self.decode)

    def from_mask(self, q, k, v, mask):
        """Drop-in for ``attention_math.attention`` when ``mask`` is causal & key padding (see module doc)."""
        return self.flash(q, k, v, causal=True, key_mask=mask[:, -1, :])


def attention_impl(
    backend: str | None = None,
    *,
    interpret: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    decode_splits: int = 4,
) -> AttentionImpl:
    """Pick the attention implementation for ``backend`` (default: ``jax.default_backend()``).

    ``"tpu"`` -> Pallas/Mosaic, ``"gpu"``/``"cuda"``/``"rocm"`` -> Pallas/Triton, ``"cpu"`` ->
    jnp reference; ``interpret=True`` -> Pallas kernels in interpret mode whatever the backend.
    ``"reference"`` forces the jnp references. Block sizes apply to the Pallas kernels only.
    """
    backend = backend or jax.default_backend()
    if not interpret and backend in ("cpu", "reference"):
        return AttentionImpl("reference", mha_reference, decode_attention_reference)
    resolved = resolve_backend(backend, interpret)
    flash = functools.partial(flash_attention, block_q=block_q, block_k=block_k, backend=resolved)
    decode = functools.partial(decode_attention, block_k=block_k, num_splits=decode_splits, backend=resolved)
    return AttentionImpl(f"pallas_{resolved}", flash, decode)
