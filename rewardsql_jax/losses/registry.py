"""Name -> loss registry. A loss registers with its family, which tells the train step how to feed it, and with
its normalisation, which tells it how micro-batches accumulate, so a new loss is one decorated function in one
file (no adapter to write):

  policy_gradient  fn(logprobs, old_logprobs, advantages, mask, *, [ref_logprobs], [entropy], **options) on
                   [B, T] arrays of the completion tokens (advantages broadcast to every token); ``ref_logprobs``
                   (the frozen reference's) and ``entropy`` (the policy's per-token entropies) are passed when the
                   function takes them, or when its ``needs(options)`` names them.
  preference       fn(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, **options) on [B]
                   summed completion log-probs (DPO-style).
  supervised       fn(logits, targets, mask, *, [weights], [rewards], **options): next-token prediction on
                   loss-masked tokens (``weights`` / ``rewards``: the batch's per-row fields). A supervised loss may
                   also carry ``fn.from_logprobs(logprobs, hit, mask, **same)`` (the same loss from the targets'
                   log-probs and first-argmax hits, as ``sft`` does); the train step then computes those with one
                   fused vocabulary op (``training.vocab_head``).
  prm              fn(tag_logits, labels, step_mask, **options): per-step ' +' / ' -' logits of the PRM.

``reduction`` says what the returned mean divides by (``normalisation.py``: token_mean, sequence_mean, row_mean,
fixed_length, or custom for a loss returning its own (numerator, denominator, metrics)); a loss whose
normalisation depends on its options (grpo's ``agg``, sft's ``reduction``) passes a function of the options.

Batch-global needs are hooks declared here, on the loss, and run by its family (``training/families.py``):
``prepare`` (policy_gradient: ``prepare(old_logprobs, ref_logprobs, token_rewards, mask, **options) ->
Prepared``, statistics over the whole batch before it is split into micro-batches, as REINFORCE++'s whitening)
and ``keep`` (supervised: ``keep(rewards, **options) -> [B]`` rows to train on, as rejection sampling's filter).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable

import jax

from .normalisation import REDUCTIONS, Normalisation

FAMILIES = ("policy_gradient", "preference", "supervised", "prm")
# the optional inputs a policy-gradient loss may ask for (needs)
OPTIONAL_INPUTS = ("ref_logprobs", "entropy")


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a ``prepare`` hook returns: the batch's advantages ``[B, T]`` for every micro-batch, metrics of the
    whole batch, and the options the loss then runs with on each micro-batch."""

    advantages: jax.Array
    metrics: dict
    options: dict


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """A registered loss: the function, its family, its normalisation and its family hooks."""

    name: str
    fn: Callable
    family: str
    reduction: str | Callable = "token_mean"
    needs: Callable | None = None
    prepare: Callable | None = None
    keep: Callable | None = None
    arguments: frozenset = frozenset()  # the function's named parameters
    keywords: frozenset | None = frozenset()  # its keyword-only options; None when it takes **kwargs

    def normalisation(self, options: dict) -> Normalisation:
        """The normalisation of this loss with ``options`` (``normalisation.py``)."""
        r = self.reduction(options) if callable(self.reduction) else self.reduction
        return r if isinstance(r, Normalisation) else Normalisation(r)

    def inputs(self, options: dict) -> set[str]:
        """The optional inputs (``OPTIONAL_INPUTS``) the loss needs with ``options``: its ``needs`` hook, or those
        among its parameters."""
        if self.needs is not None:
            return set(self.needs(options))
        return {name for name in OPTIONAL_INPUTS if name in self.arguments}

    @property
    def reads(self) -> str:
        """The batch field a policy-gradient loss takes its learning signal from: ``token_rewards`` when the
        function takes per-token rewards (and turns them into returns itself, REINFORCE++), else ``advantages``."""
        return "token_rewards" if self.takes("token_rewards") else "advantages"

    def takes(self, argument: str) -> bool:
        """Whether the function has a parameter named ``argument``."""
        return argument in self.arguments


_LOSSES: dict[str, LossSpec] = {}
_HOOK_FAMILY = {"needs": "policy_gradient", "prepare": "policy_gradient", "keep": "supervised"}


def _signature(fn) -> tuple[frozenset, frozenset | None]:
    """(named parameters, keyword-only options or None when the function takes **kwargs / has no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins / C callables without a signature
        return frozenset(), None
    keywords: frozenset | None = frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        keywords = None
    return frozenset(p.name for p in params), keywords


def register(
    name: str,
    *,
    family: str,
    reduction: str | Callable = "token_mean",
    needs: Callable[[dict], Iterable[str]] | None = None,
    prepare: Callable | None = None,
    keep: Callable | None = None,
    override: bool = False,
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
    if not callable(reduction) and reduction not in REDUCTIONS:
        raise ValueError(f"loss {name!r}: reduction={reduction!r}; choose one of {list(REDUCTIONS)}.")
    hooks = {"needs": needs, "prepare": prepare, "keep": keep}
    for hook, fam in _HOOK_FAMILY.items():
        if hooks[hook] is not None and family != fam:
            raise ValueError(f"loss {name!r}: the hook {hook}= belongs to the {fam} family, not {family}.")

    def decorator(fn: Callable) -> Callable:
        old = _LOSSES.get(name)
        if old is not None and old.fn is not fn and not override:
            raise ValueError(
                f"a loss named {name!r} is already registered ({old.fn.__module__}.{old.fn.__name__}); "
                f"pick another name or pass override=True."
            )
        arguments, keywords = _signature(fn)
        _LOSSES[name] = LossSpec(name, fn, family, reduction, needs, prepare, keep, arguments, keywords)
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
