"""The one training harness: every trainer of the library (SFT, PRM, the RL loops, SQLConductor's SFT and GRPO)
is ``fit(state, step, ...)`` around its own ``step(state, i) -> (state, record)``.

``fit`` owns what they share: resume from the newest finished checkpoint (``StepCheckpoints``), the progress bar,
one log record per step, a checkpoint every ``checkpoint_every`` steps and after the last, and the early stops —
``stop_after`` steps of this process (the kill test hook; raises ``stop_error``) and a SIGTERM of any process
(``preemption``; raises ``Preempted``), both only once the checkpoint is on disk. A step whose loss is not finite
was not applied (the train step's NaN guard); with ``raise_on_nonfinite`` the loop stops there
(``NonFiniteLossError``, the newest checkpoint being the last good one), else the record says so and it goes on.
What a step draws (batch, questions, sampling seed) must depend on ``(seed, i)`` alone, so a resumed run repeats
the uninterrupted one step for step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier

from .preemption import Preempted, stop_requested
from .state import TrainState
from .step_checkpoints import StepCheckpoints


class StoppedEarly(RuntimeError):
    """``stop_after`` steps ran; the checkpoint is written and a rerun resumes from it."""


class NonFiniteLossError(FloatingPointError):
    """A step's loss or gradient was NaN/inf (that update was not applied) and ``raise_on_nonfinite`` was set."""


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The final state, every step's record (restored ones included) and the step the run resumed at."""

    state: TrainState
    history: list
    resumed_from: int


def fit(
    state: TrainState,
    step: Callable[[TrainState, int], tuple[TrainState, dict]],
    *,
    steps: int,
    desc: str,
    log: Callable[[dict], None] | None = None,
    checkpoints: StepCheckpoints | None = None,
    checkpoint_every: int = 0,
    stop_after: int = 0,
    stop_error: type[Exception] = StoppedEarly,
    postfix: Sequence[str] = ("loss",),
    raise_on_nonfinite: bool = False,
    name: str | None = None,
    stop_reason: str = "stop_after",
    log_every: int = 1,
    say=print,
) -> FitResult:
    """Run ``step`` for i = start .. steps - 1 (module docstring); ``checkpoint_every`` 0 = only after the last.

    A step's record may hold device scalars: they are fetched (one ``device_get``) only on every ``log_every``-th
    and the last step, which alone are logged and kept in the history, so the loop does not wait for the device
    in between. ``name`` (default ``desc``) labels the printed messages; ``stop_reason`` names the setting behind
    ``stop_after``."""
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    label = name or desc
    start, history = 0, list[dict]()
    if checkpoints is not None:
        restored = checkpoints.restore(state)
        if restored is not None:
            state, start, history = restored
            say(f"[{label}] resumed from step {start}/{steps} (checkpoint in {checkpoints.ck.directory})")
            if log is not None:
                log({"resumed_at_step": start})
    ran = 0
    bar = tqdm(range(start, steps), initial=start, total=steps, desc=desc, dynamic_ncols=True)
    try:
        for i in bar:
            state, record = step(state, i)
            if i % log_every == 0 or i == steps - 1:
                record = {"step": i, **_host(record)}
                history.append(record)
                if log is not None:
                    log(record)
                bar.set_postfix({k: f"{record[k]:.4g}" for k in postfix if isinstance(record.get(k), float)})
                if raise_on_nonfinite and record.get("loss_is_finite") is False:
                    _raise_nonfinite(checkpoints, i, record)
            ran += 1
            _checkpoint_or_stop(
                checkpoints,
                state,
                i,
                steps,
                history,
                ran=ran,
                limit=stop_after,
                every=checkpoint_every,
                label=label,
                stop_error=stop_error,
                reason=stop_reason,
            )
    finally:
        bar.close()
        if checkpoints is not None:
            checkpoints.close()
    return FitResult(state, history, start)


def _host(record: dict) -> dict:
    """Device scalars of a record as Python floats / bools (one transfer); other values as they are."""
    fetched = jax.device_get(record)
    return {
        k: (v.item() if isinstance(v, np.ndarray | np.generic) and np.ndim(v) == 0 else v) for k, v in fetched.items()
    }


def _raise_nonfinite(checkpoints, i, record):
    last = None
    if checkpoints is not None:
        checkpoints.wait()
        last = max(checkpoints.ck.all_steps(), default=None)
    where = f"the last good checkpoint is state step {last}" if last is not None else "no checkpoint was saved"
    raise NonFiniteLossError(
        f"non-finite loss at step {i} (loss={record.get('loss')}, grad_norm="
        f"{record.get('grad_norm')}); the update was not applied and training stopped; {where}. "
        f"Lower the learning rate, check the batch for NaN/inf inputs, or enable grad clipping."
    )


def _checkpoint_or_stop(checkpoints, state, i, steps, history, *, ran, limit, every, label, stop_error, reason):
    last, stop = i == steps - 1, bool(limit) and ran >= limit
    preempted = not last and stop_requested()
    if checkpoints is not None and (last or (every and (i + 1) % every == 0) or stop or preempted):
        checkpoints.save(state, i + 1, history)
    if (stop or preempted) and not last:
        where = "no checkpoint (none configured)"
        if checkpoints is not None:
            checkpoints.wait()
            where = f"checkpoint in {checkpoints.ck.directory}"
        barrier(f"{label} checkpoint {i + 1}")
        if preempted:
            raise Preempted(
                f"{label} preempted (SIGTERM) at step {i + 1}/{steps}: {where}; the run is resumable: "
                f"rerun the same command"
            )
        raise stop_error(
            f"{label} stopped after {ran} step(s) at step {i + 1}/{steps} ({reason}); rerun to resume from the {where}"
        )
