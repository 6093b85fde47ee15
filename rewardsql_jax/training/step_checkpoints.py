"""Resumable training: Orbax checkpoints of the train state plus the loop's next step and metrics history.

The train state (params, optimizer state, step, RNG, frozen reference) goes through
``training.checkpoint.Checkpointer`` (Orbax: async, sharded, keep the 2 newest) under ``<stage>/checkpoint/``;
next to it ``<stage>/checkpoint_meta/<n>.json`` holds, for the Orbax checkpoint of state step n, the next loop step
and the metrics history. Orbax lists only finished checkpoints, so a run killed during an async save
resumes from the previous one, whose meta file is still there. (Loop step and state step differ only when
the NaN guard skipped an update; then the state is unchanged and its meta file is simply rewritten.)

Every step of the RL loops draws its questions and sampling seed from ``(seed, step)`` alone, and the
supervised loops their batch from ``(seed, step)``, so a resumed run repeats the uninterrupted run step for
step and reaches the same parameters (tests/stages/test_rl.py, tests/training/test_fit.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from rewardsql_jax.distributed import is_primary

from .checkpoint import Checkpointer
from .state import TrainState

CHECKPOINT = "checkpoint"
META = "checkpoint_meta"


class StepCheckpoints:
    """``save(state, next_step, history)`` / ``restore(like) -> (state, next_step, history) | None``."""

    def __init__(self, stage_dir: Path, *, async_save: bool = True, name: str = "rl"):
        self.name = name
        self.meta_dir = Path(stage_dir) / META
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        self.ck = Checkpointer(Path(stage_dir) / CHECKPOINT, max_to_keep=2, async_save=async_save)

    def save(self, state: TrainState, next_step: int, history: list) -> None:
        step = int(state.step)
        if step not in self.ck.all_steps():
            self.ck.save(state)
        if not is_primary():  # Orbax writes the arrays from every process; the meta file is the primary's
            return
        tmp = self.meta_dir / f"{step}.json.tmp"
        tmp.write_text(json.dumps({"next_step": int(next_step), "history": history}, default=float))
        tmp.replace(self.meta_dir / f"{step}.json")
        keep = set(self.ck.all_steps()) | {step}
        for old in self.meta_dir.glob("*.json"):
            if int(old.stem) not in keep:
                old.unlink()

    def restore(self, like: TrainState, *, log=print) -> tuple[TrainState, int, list] | None:
        """The newest finished checkpoint restored into ``like`` (a fresh state of the same model/optimizer).

        A newest checkpoint that cannot be read (truncated or partly written files, a missing meta file) is
        reported and the previous one is used; the damaged one is left on disk for inspection. When none can be
        read, the first error says why (most often: a checkpoint of another model / optimizer config)."""
        steps = sorted(self.ck.all_steps(), reverse=True)
        if not steps:
            return None
        first_error = None
        for step in steps:
            try:
                restored = self._restore(step, like)
            except (ValueError, TypeError, KeyError, OSError) as e:
                first_error = first_error or e
                log(
                    f"[{self.name}] checkpoint {step} in {self.ck.directory} cannot be read ({type(e).__name__}: "
                    f"{str(e)[:200]}); trying the previous one"
                )
                continue
            if step != steps[0]:
                log(
                    f"[{self.name}] resuming from checkpoint {step}: the newer one(s) {[s for s in steps if s > step]} are "
                    f"damaged (left in {self.ck.directory})"
                )
            return restored
        raise ValueError(
            f"no {self.name} checkpoint in {self.ck.directory} can be restored: it does not fit this "
            f"model/optimizer (a different config?) or its files are damaged: {first_error}. Delete "
            f"{self.ck.directory} and "
            f"{self.meta_dir} to start the {self.name} stage over"
        ) from first_error

    def _restore(self, step: int, like: TrainState) -> tuple[TrainState, int, list]:
        meta_path = self.meta_dir / f"{step}.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"its meta file {meta_path} is missing")
        meta = json.loads(meta_path.read_text())
        return self.ck.restore(step, like), int(meta["next_step"]), meta["history"]

    def wait(self) -> None:
        self.ck.wait()

    def close(self) -> None:
        self.ck.close()
