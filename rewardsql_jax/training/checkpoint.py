"""Orbax checkpoints of a TrainState (+ the Grain data-iterator position), async and keep-N; HF export.

A checkpoint at step s holds params, optimizer state, step, RNG, the frozen reference (when the state has
one) and the JSON state of the data iterator after the batches of steps 1..s, so a resumed run continues
with exactly the next batch and reaches the same parameters as an uninterrupted one. A LoRA state's params are
its adapters: its base weights (``TrainState.frozen``) are not saved but come with the state restored into.
"""

from __future__ import annotations

from pathlib import Path

import jax
import orbax.checkpoint as ocp

from rewardsql_jax.models import save_pretrained

from .state import TrainState

_ARRAY_FIELDS = ("params", "opt_state", "step", "rng", "ref_params")


def _arrays(state: TrainState) -> dict:
    return {name: getattr(state, name) for name in _ARRAY_FIELDS if getattr(state, name) is not None}


class Checkpointer:
    """Keep the ``max_to_keep`` newest checkpoints of a run under ``directory`` (one sub-directory per step).

    ``async_save=True`` returns from ``save`` once the arrays are copied off the devices and writes in a
    background thread (so the next, donating train step can run); ``wait()`` blocks until written.
    """

    def __init__(self, directory, *, max_to_keep: int | None = 3, async_save: bool = True):
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None (keep all), got {max_to_keep}.")
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=async_save, create=True
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data"))

    def save(self, state: TrainState, *, data_iterator=None, force: bool = True) -> bool:
        """Save ``state`` (and ``data_iterator.get_state()``) as the checkpoint of step ``state.step``."""
        items = {"state": ocp.args.StandardSave(_arrays(state))}
        if data_iterator is not None:
            items["data"] = ocp.args.JsonSave(data_iterator.get_state())
        return self.manager.save(int(state.step), args=ocp.args.Composite(**items), force=force)

    def all_steps(self) -> list[int]:
        """Steps with a finished checkpoint, oldest first."""
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        """Newest finished checkpoint step, or None when there is none."""
        return self.manager.latest_step()

    def restore(self, step: int, like: TrainState, *, data_iterator=None) -> TrainState:
        """Restore checkpoint ``step`` into the structure, dtypes and shardings of ``like``.

        ``like`` is a freshly created state of the same model and optimizer (its values are not used).
        When ``data_iterator`` is given its position is restored in place (``set_state``).
        """
        if step not in self.manager.all_steps():
            raise FileNotFoundError(
                f"no checkpoint for step {step} in {self.directory}; available steps: {self.all_steps()}."
            )
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, _arrays(like))
        items = {"state": ocp.args.StandardRestore(target)}
        has_data = (self.directory / str(step) / "data").exists()
        if data_iterator is not None:
            if not has_data:
                raise ValueError(
                    f"checkpoint {step} in {self.directory} holds no data-iterator state; "
                    f"restore without data_iterator or save one with the checkpoint."
                )
            items["data"] = ocp.args.JsonRestore()
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        if data_iterator is not None:
            data_iterator.set_state(restored["data"])
        return like.replace(**restored["state"])

    def wait(self) -> None:
        """Block until every pending asynchronous save is on disk."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and release the manager's threads."""
        self.manager.wait_until_finished()
        self.manager.close()


def restore_latest(checkpointer: Checkpointer, like: TrainState, *, data_iterator=None) -> TrainState | None:
    """The newest checkpoint restored into ``like``'s structure, or None when the directory has none."""
    step = checkpointer.latest_step()
    if step is None:
        return None
    return checkpointer.restore(step, like, data_iterator=data_iterator)


def export_pretrained(state: TrainState, path, *, dtype=None) -> Path:
    """Write the policy (or PRM) of ``state`` as a HF directory (config.json + safetensors)."""
    return save_pretrained(state.model(), path, dtype=dtype)
