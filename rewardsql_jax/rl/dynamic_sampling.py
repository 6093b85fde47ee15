"""DAPO dynamic sampling (Yu et al. 2025, Sec. 3.2; verl ``algorithm.filter_groups``): a group whose rewards are
all equal has zero group-normalised advantage and teaches nothing, so the step draws more questions until it has
``prompts_per_step`` groups with some spread (at most ``rl.filter_groups_max_draws`` draws), and trains on those.
When the draws run out, uninformative groups fill the batch (their advantages are 0), so every step keeps one
shape and the jitted train step compiles once."""

from __future__ import annotations

import numpy as np


def informative_groups(rewards, group_size: int) -> np.ndarray:
    """[P] bool: the groups (``group_size`` consecutive rows each) whose rewards are not all equal."""
    r = np.asarray(rewards, np.float64).reshape(-1, group_size)
    return r.max(axis=1) > r.min(axis=1)


def choose_groups(informative: list[np.ndarray], wanted: int) -> list[tuple[int, int]]:
    """(draw, group) pairs of the batch: informative groups in draw order first, then uninformative ones of the
    first draws to fill ``wanted`` groups."""
    good = [(d, g) for d, flags in enumerate(informative) for g in np.flatnonzero(flags)]
    rest = [(d, g) for d, flags in enumerate(informative) for g in np.flatnonzero(~flags)]
    return [(d, int(g)) for d, g in (good + rest)[:wanted]]


def group_rows(groups: list[tuple[int, int]], group_size: int, draw_rows: list[int]) -> list[int]:
    """Row indices, in a concatenation of the draws (``draw_rows[d]`` rows each), of the chosen groups."""
    offsets = np.concatenate([[0], np.cumsum(draw_rows)])
    return [int(offsets[d]) + g * group_size + k for d, g in groups for k in range(group_size)]
