"""Group-relative outcome advantages (GRPO; TRL GRPOTrainer._generate_and_score_completions)."""

from __future__ import annotations

import jax.numpy as jnp


def group_zscore(groups, *, eps: float, ddof: int, xp=jnp):
    """(x - mean_g) / (std_g + eps) along the last axis of ``groups`` [..., G], computed with the array module
    ``xp`` in the input's precision (``jnp`` float32 in the GRPO step, ``numpy`` float64 where Reward-SQL's
    released reward manager is matched number for number). A group of at most ``ddof`` values has no std."""
    if groups.shape[-1] <= ddof:
        raise ValueError(
            f"a group of {groups.shape[-1]} values has no std with ddof={ddof}; use a larger group or ddof=0."
        )
    centred = groups - xp.mean(groups, axis=-1, keepdims=True)
    return centred / (xp.std(groups, axis=-1, ddof=ddof, keepdims=True) + eps)


def group_advantages(rewards, group_size: int, *, eps: float = 1e-4, ddof: int = 1, scale_std: bool = True):
    """A_i = (r_i - mean_g) / (std_g + eps) over contiguous groups of `group_size` (GRPO, Shao et al. 2024, Sec. 4.1.2).

    Defaults follow TRL: Bessel-corrected std (ddof=1) and eps=1e-4. scale_std=False returns r_i - mean_g
    (Dr. GRPO, Liu et al. 2025, Sec. 3.2: no std normalisation).

    Args:
      rewards: [N] rewards, the G completions of each prompt contiguous (prompt-major), N % group_size == 0.
    Returns: [N] float32 advantages.
    """
    r = jnp.asarray(rewards, jnp.float32)
    if r.ndim != 1:
        raise ValueError(f"rewards must be a 1-D array [N], got shape {r.shape}.")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}.")
    if r.shape[0] % group_size != 0:
        raise ValueError(
            f"rewards has {r.shape[0]} entries, not a multiple of group_size={group_size}; "
            f"pass all {group_size} completions of every prompt, grouped contiguously."
        )
    if scale_std and group_size <= ddof:
        raise ValueError(
            f"group_size={group_size} is too small for a std with ddof={ddof}; "
            f"use group_size > {ddof}, ddof=0 or scale_std=False."
        )
    g = r.reshape(-1, group_size)
    if scale_std:
        return group_zscore(g, eps=eps, ddof=ddof).reshape(-1)
    return (g - jnp.mean(g, axis=1, keepdims=True)).reshape(-1)
