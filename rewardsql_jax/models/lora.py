"""LoRA adapters on the decoder's projections (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models").

Eq. 3 of the paper, ``h = W0 x + B A x``, scaled by ``alpha / r`` (Sec. 4.1), with our input-major layout: a
targeted ``Linear`` computes ``y = x W (+ bias) + (dropout(x) A B) * alpha / r`` with the frozen ``W [d_in, d_out]``,
``A [d_in, r]`` and ``B [r, d_out]``; the base matmul and the adapter's run side by side (no merged weight is
formed), so a sampler runs base + adapters as they are. Initialised as ``peft`` does: A kaiming-uniform with
``a = sqrt(5)`` (``U(-1/sqrt(d_in), 1/sqrt(d_in))``), B zeros, so a fresh adapter leaves the model unchanged.

Adapters are ``LoRAParam`` variables (a kind of ``nnx.Param``, with ``logical_axes`` like every parameter):
``nnx.state(model, LoRAParam)`` is the adapters alone. Model-level functions (add, drop, merge, dropout keys) are
in ``models.adapters``; the ``peft`` file format in ``models.lora_io``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

# the projections an adapter may target, by the short names LoRAConfig.targets uses; the module is f"{t}_proj"
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# storage dtypes of a LoRA model's frozen base ("" = as loaded)
BASE_DTYPES = ("", "float32", "bfloat16")
# the adapters' own storage dtype: fp32 master weights whatever the base's (peft's autocast_adapter_dtype)
ADAPTER_DTYPE = jnp.float32


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Which projections carry adapters and how they are scaled. ``rank`` 0 = no adapters (the default).

    ``alpha``: the output of ``B A`` is scaled by ``alpha / rank`` (peft's ``lora_alpha``); ``dropout``: on the
    adapter's input in train steps only (peft's ``lora_dropout``); ``targets``: any of ``TARGETS`` (``q k v o``
    attention, ``gate up down`` MLP), written as a tuple or, on the command line, ``model.lora.targets=q,v,gate``.
    ``base_dtype``: the storage dtype of the frozen base weights once adapters are added (``"bfloat16"`` halves
    them, as QLoRA-style recipes hold the base below the adapters' precision); empty keeps the loaded dtype. The
    adapters themselves are always fp32 master weights.
    """

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple = ("q", "k", "v", "o")
    base_dtype: str = ""

    def __post_init__(self):
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", tuple(t.strip() for t in self.targets.split(",") if t.strip()))
        object.__setattr__(self, "targets", tuple(self.targets))
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 0:
            raise ValueError(f"lora.rank={self.rank!r}: must be an integer >= 0 (0 = no adapters)")
        if not self.alpha > 0:
            raise ValueError(f"lora.alpha={self.alpha!r}: must be > 0 (adapters are scaled by alpha / rank)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora.dropout={self.dropout!r}: must be in [0, 1)")
        unknown = [t for t in self.targets if t not in TARGETS]
        if unknown or len(set(self.targets)) != len(self.targets) or (self.rank and not self.targets):
            problem = f"unknown {unknown}" if unknown else "repeated" if self.targets else "empty"
            raise ValueError(f"lora.targets={self.targets!r} ({problem}): choose distinct ones of {', '.join(TARGETS)}")
        if self.base_dtype not in BASE_DTYPES:
            choices = ", ".join(repr(d) for d in BASE_DTYPES)
            raise ValueError(
                f"lora.base_dtype={self.base_dtype!r}: choose one of {choices} ('' keeps the loaded dtype)"
            )

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        """``alpha / rank``: the factor on ``B A x``."""
        return self.alpha / self.rank

    def on(self, target: str) -> LoRAConfig | None:
        """This config when it puts an adapter on ``target`` (one of ``TARGETS``), else None."""
        return self if self.enabled and target in self.targets else None


class LoRAParam(nnx.Param):
    """A LoRA adapter matrix (A or B): trained while the other ``nnx.Param`` stay frozen."""


class LoRADropoutKey(nnx.Variable):
    """The PRNG key of one adapter's dropout, attached inside a train step only (``adapters.dropout_on``)."""


# kaiming_uniform_(a=sqrt(5)) of a torch [r, d_in] weight: gain^2 = 2 / (1 + 5) = 1/3, bound sqrt(3 / (3 d_in))
_a_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform", in_axis=-2, out_axis=-1)


class LoRA(nnx.Module):
    """The adapter of one projection: ``(dropout(x) A B) * alpha / r``, ``A [d_in, r]``, ``B [r, d_out]``.

    ``axes`` are the base kernel's logical axes; the rank axis is ``lora_rank`` (replicated by the default rules).
    """

    def __init__(self, d_in: int, d_out: int, axes, lora: LoRAConfig, *, key, compute_dtype):
        self.a = LoRAParam(_a_init(key, (d_in, lora.rank), ADAPTER_DTYPE), logical_axes=(axes[0], "lora_rank"))
        self.b = LoRAParam(jnp.zeros((lora.rank, d_out), ADAPTER_DTYPE), logical_axes=("lora_rank", axes[1]))
        self.scale = lora.scale
        self.dropout = lora.dropout
        self.dropout_key: LoRADropoutKey | None = nnx.data(None)
        self.compute_dtype = compute_dtype

    def __call__(self, x):
        cdt = self.compute_dtype
        if self.dropout and self.dropout_key is not None:
            keep = jax.random.bernoulli(self.dropout_key[...], 1.0 - self.dropout, x.shape)
            x = jnp.where(keep, x / (1.0 - self.dropout), 0).astype(x.dtype)
        h = jnp.dot(x.astype(cdt), self.a[...].astype(cdt))
        return jnp.dot(h, self.b[...].astype(cdt)) * jnp.asarray(self.scale, cdt)
