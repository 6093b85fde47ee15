"""Resumable RL state: params, optimizer state, step and RNG of the train state plus the step history.

Saved every few RL steps to ``rl/checkpoint/`` as ``state.npz`` (the leaves of ``(params, opt_state, step,
rng)`` in ``jax.tree`` order) and ``meta.json`` (next step, metrics history), written to a temporary folder
and renamed into place, so a run killed mid-save keeps its previous checkpoint. The reference params are
not saved: they are the SFT policy, reloaded from ``sft/policy``. Restoring into a freshly created state
of the same model and optimizer gives back exactly the saved arrays; since every RL step draws its prompts
and sampling seed from ``(seed, step)`` alone, a resumed run repeats the uninterrupted run step for step.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.training.state import TrainState

CHECKPOINT = "checkpoint"


def _saved_tree(state: TrainState):
    return (state.params, state.opt_state, state.step, state.rng)


def save_checkpoint(directory: Path, state: TrainState, next_step: int, history: list) -> Path:
    """Write the state and history atomically to ``directory`` (replacing an older checkpoint)."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    leaves = [np.asarray(x) for x in jax.device_get(jax.tree.leaves(_saved_tree(state)))]
    np.savez(tmp / "state.npz", **{f"leaf_{i:05d}": x for i, x in enumerate(leaves)})
    (tmp / "meta.json").write_text(json.dumps({"next_step": int(next_step), "leaves": len(leaves),
                                               "history": history}, default=float))
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    if old.exists():
        shutil.rmtree(old)
    return directory


def load_checkpoint(directory: Path, state: TrainState) -> tuple[TrainState, int, list] | None:
    """(state with the saved arrays, next step, history), or None when ``directory`` holds no checkpoint.

    ``state`` supplies the tree structure (same model and optimizer); a mismatch is a clear error.
    """
    directory = Path(directory)
    if not (directory / "meta.json").exists():
        return None
    meta = json.loads((directory / "meta.json").read_text())
    tree = _saved_tree(state)
    leaves, treedef = jax.tree.flatten(tree)
    with np.load(directory / "state.npz") as f:
        saved = [f[f"leaf_{i:05d}"] for i in range(meta["leaves"])]
    shapes = [np.shape(x) for x in leaves]
    if len(saved) != len(leaves) or any(s.shape != shape for s, shape in zip(saved, shapes)):
        raise ValueError(f"the RL checkpoint in {directory} does not fit this model/optimizer (a different config?); "
                         f"delete {directory} to start the RL stage over")
    restored = [jax.numpy.asarray(s, dtype=np.asarray(x).dtype) for s, x in zip(saved, leaves)]
    params, opt_state, step, rng = jax.tree.unflatten(treedef, restored)
    return state.replace(params=params, opt_state=opt_state, step=step, rng=rng), int(meta["next_step"]), meta["history"]
