"""Name -> loss registry. A loss registers with its family, which tells the train step how to feed it, so a
new loss is one decorated function in one file (no adapter to write):

  policy_gradient  fn(logprobs, old_logprobs, advantages, mask, *, [ref_logprobs], **options) on [B, T] arrays
                   of the completion tokens (advantages broadcast to every token); ``ref_logprobs`` (the frozen
                   reference's) is passed when the function takes it.
  preference       fn(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, **options) on [B]
                   summed completion log-probs (DPO-style).
  supervised       fn(logits, targets, mask, *, weights, **options): next-token prediction on loss-masked tokens.
                   A supervised loss may also carry ``fn.from_logprobs(logprobs, hit, mask, *, weights, **options)``
                   (the same loss from the targets' log-probs and first-argmax hits, as ``sft`` does); the train
                   step then computes those with one fused vocabulary op (``training.vocab_head``).
  prm              fn(tag_logits, labels, step_mask, **options): per-step ' +' / ' -' logits of the PRM.

``reduction`` says what the returned mean divides by, so micro-batches accumulate exactly: "token_mean" (the
mask's tokens) or "sequence_mean" (rows). Built-in losses with their own batch handling (grpo's aggregation
modes, REINFORCE++'s whole-batch returns, rejection sampling's filter) keep their own adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

FAMILIES = ("policy_gradient", "preference", "supervised", "prm")
REDUCTIONS = ("token_mean", "sequence_mean")


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """A registered loss: the function, its family and the denominator of its mean."""

    name: str
    fn: Callable
    family: str
    reduction: str


_LOSSES: dict[str, LossSpec] = {}


def register(
    name: str, *, family: str, reduction: str = "token_mean", override: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator registering ``fn(...) -> (loss, metrics)`` under ``name`` in ``family`` (module docstring).

    Registering a name twice raises ValueError unless override=True, so two files cannot silently collide.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"loss name must be a non-empty string, got {name!r}.")
    if family not in FAMILIES:
        raise ValueError(
            f"loss {name!r}: family={family!r}; choose one of {list(FAMILIES)} (it decides which "
            f"batch and arguments the train step gives the loss)."
        )
    if reduction not in REDUCTIONS:
        raise ValueError(f"loss {name!r}: reduction={reduction!r}; choose one of {list(REDUCTIONS)}.")

    def decorator(fn: Callable) -> Callable:
        old = _LOSSES.get(name)
        if old is not None and old.fn is not fn and not override:
            raise ValueError(
                f"a loss named {name!r} is already registered ({old.fn.__module__}.{old.fn.__name__}); "
                f"pick another name or pass override=True."
            )
        _LOSSES[name] = LossSpec(name, fn, family, reduction)
        return fn

    return decorator


def spec(name: str) -> LossSpec:
    """The registration of ``name``; unknown names raise ValueError listing the registered ones."""
    try:
        return _LOSSES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown loss {name!r}; registered losses: {', '.join(names())}. Register a new one with "
            f"@rewardsql_jax.losses.register({name!r}, family=...) in a file you load with "
            f"plugins=path/to/file.py."
        ) from None


def get(name: str) -> Callable:
    """The loss function registered under ``name``."""
    return spec(name).fn


def family(name: str) -> str:
    """The family of loss ``name`` (``FAMILIES``)."""
    return spec(name).family


def names(family: str | None = None) -> list[str]:
    """Sorted names of the registered losses (of one family when given)."""
    return sorted(n for n, s in _LOSSES.items() if family is None or s.family == family)
