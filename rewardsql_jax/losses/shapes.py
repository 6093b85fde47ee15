"""Shape checks shared by the losses: one clear ValueError naming the argument at fault."""

from __future__ import annotations

from collections.abc import Sequence


def check_rank(name: str, x, rank: int, what: str) -> None:
    """Raise ValueError unless `x` has `rank` dimensions (`what` describes the expected layout)."""
    if getattr(x, "ndim", None) != rank:
        shape = getattr(x, "shape", type(x).__name__)
        raise ValueError(f"{name} must be a {rank}-D array {what}, got shape {shape}.")


def check_same_shape(ref_name: str, ref, **others) -> None:
    """Raise ValueError if any array in `others` (name=array, None skipped) differs in shape from `ref`."""
    for name, x in others.items():
        if x is None:
            continue
        if tuple(x.shape) != tuple(ref.shape):
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}; "
                f"they must match (pad every per-token array to the same [B, T])."
            )


def check_leading(ref_name: str, ref_shape: Sequence[int], name: str, x) -> None:
    """Raise ValueError unless x.shape starts with `ref_shape` (e.g. per-sequence [B] against [B, T])."""
    if tuple(x.shape[: len(ref_shape)]) != tuple(ref_shape):
        raise ValueError(
            f"{name} has shape {tuple(x.shape)}; its leading dimensions must equal {tuple(ref_shape)} from {ref_name}."
        )


class ChoiceError(ValueError):
    """An option outside its choices; ``name``, ``value`` and ``choices`` let a caller name the setting."""

    def __init__(self, name: str, value, choices: Sequence[str]):
        super().__init__(f"{name}={value!r} is not supported; choose one of {sorted(choices)}.")
        self.name, self.value, self.choices = name, value, tuple(choices)


def check_choice(name: str, value, choices: Sequence[str]) -> None:
    """Raise ``ChoiceError`` (a ValueError) unless `value` is one of `choices`."""
    if value not in choices:
        raise ChoiceError(name, value, choices)
