"""Name -> loss function registry, so a config can say `loss="grpo"` and a researcher can add a loss in one file."""

from __future__ import annotations

from typing import Callable

_LOSSES: dict[str, Callable] = {}


def register(name: str, *, override: bool = False) -> Callable[[Callable], Callable]:
    """Decorator registering `fn(...) -> (loss, metrics)` under `name` (cf. verl register_policy_loss).

    Registering a name twice raises ValueError unless override=True, so two files cannot silently collide.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"loss name must be a non-empty string, got {name!r}.")

    def decorator(fn: Callable) -> Callable:
        if name in _LOSSES and _LOSSES[name] is not fn and not override:
            raise ValueError(
                f"a loss named {name!r} is already registered ({_LOSSES[name].__module__}."
                f"{_LOSSES[name].__name__}); pick another name or pass override=True."
            )
        _LOSSES[name] = fn
        return fn

    return decorator


def get(name: str) -> Callable:
    """Return the loss registered under `name`; unknown names raise ValueError listing the registered ones."""
    try:
        return _LOSSES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown loss {name!r}; registered losses: {', '.join(names())}. "
            f"Register a new one with @rewardsql_jax.losses.register({name!r})."
        ) from None


def names() -> list[str]:
    """Sorted names of all registered losses."""
    return sorted(_LOSSES)
