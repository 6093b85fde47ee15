"""A small training loop: step, log, checkpoint, stop on a non-finite loss with the last good checkpoint intact."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import jax
import numpy as np
from tqdm.auto import tqdm

from .checkpoint import Checkpointer
from .metrics_log import summary_line
from .state import TrainState


class NonFiniteLossError(FloatingPointError):
    """Raised by ``train`` when a step's loss or gradient is NaN/inf (that update was not applied)."""


def _host(metrics) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in jax.device_get(metrics).items()}


def train(
    state: TrainState,
    train_step: Callable,
    data_iter: Iterator,
    *,
    num_steps: int,
    checkpointer: Checkpointer | None = None,
    save_every: int = 100,
    log_every: int = 10,
    progress: bool = True,
    on_log: Callable[[int, dict], None] | None = None,
):
    """Run ``train_step`` until ``state.step == num_steps``; return ``(state, history)``.

    ``num_steps`` is the target step count, so a state restored at step k runs ``num_steps - k`` more steps.
    Every ``save_every`` steps (and at the end) the state and ``data_iter``'s position (when it has
    ``get_state``) are checkpointed. ``history`` holds the metrics of every ``log_every``-th step (and the last)
    as host floats, with a ``step`` key (printed as one line when ``progress``). A NaN/inf loss raises
    ``NonFiniteLossError`` after pending saves finish; the faulty update is never applied, and the newest
    checkpoint is the last good one.
    """
    if save_every < 1 or log_every < 1:
        raise ValueError(f"save_every and log_every must be >= 1, got {save_every} and {log_every}.")
    start = int(state.step)
    if num_steps < start:
        raise ValueError(
            f"num_steps={num_steps} is below the state's step {start}; num_steps is the target "
            f"step count, not the number of additional steps."
        )
    saveable_iter = data_iter if hasattr(data_iter, "get_state") else None
    history: list[dict] = []
    bar = tqdm(total=num_steps, initial=start, disable=not progress, desc="train", dynamic_ncols=True)
    try:
        for step in range(start + 1, num_steps + 1):
            try:
                batch = next(data_iter)
            except StopIteration:
                raise RuntimeError(
                    f"the data iterator ran out before step {step} of {num_steps}; "
                    f"repeat the dataset (num_epochs=None) or lower num_steps."
                ) from None
            state, metrics = train_step(state, batch)
            if not bool(metrics["loss_is_finite"]):
                last = None if checkpointer is None else (checkpointer.wait() or checkpointer.latest_step())
                where = f"the last good checkpoint is step {last}" if last is not None else "no checkpoint was saved"
                raise NonFiniteLossError(
                    f"non-finite loss at step {step} (loss={float(metrics['loss'])}, "
                    f"grad_norm={float(metrics['grad_norm'])}); the update was not applied and training stopped; "
                    f"{where}. Lower the learning rate, check the batch for NaN/inf inputs, or enable grad clipping."
                )
            if step % log_every == 0 or step == num_steps:
                row = {"step": step, **_host(metrics)}
                history.append(row)
                bar.set_postfix(loss=f"{row['loss']:.4g}")
                if progress:
                    bar.write(summary_line(row))
                if on_log is not None:
                    on_log(step, row)
            if checkpointer is not None and (step % save_every == 0 or step == num_steps):
                checkpointer.save(state, data_iterator=saveable_iter)
            bar.update(1)
    finally:
        bar.close()
        if checkpointer is not None:
            checkpointer.wait()
    return state, history
