"""Preemption: a SIGTERM (how TPU VMs and spot GPUs are reclaimed, and how SLURM ends a job) during RL
checkpoints at the next step boundary and exits resumably.

Inside ``deferred_sigterm()`` a SIGTERM only raises a flag. At every step boundary the RL loops ask
``stop_requested()``: with several processes the flags are combined (one small all-gather), so every process
stops at the same step even when only one got the signal. The loop then writes its checkpoint and raises
``Preempted``; ``launch/run.py`` says the run is resumable and exits with 143 (128 + SIGTERM). Rerunning the
same command resumes from that checkpoint to the result an uninterrupted run reaches. Outside the RL loops a
SIGTERM ends the process as usual (finished stages are kept; the unfinished one starts over).
"""

from __future__ import annotations

import contextlib
import signal
import threading

import numpy as np

from rewardsql_jax.distributed import process_count

EXIT_CODE = 143
_flag = threading.Event()


class Preempted(RuntimeError):
    """The run stopped on a SIGTERM after writing a checkpoint; rerun the same command to resume."""


def _on_sigterm(signum, frame):  # the signal handler signature; neither argument is needed
    _flag.set()


@contextlib.contextmanager
def deferred_sigterm():
    """Within the block, SIGTERM sets the stop flag instead of ending the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_requested() -> bool:
    """Whether any process has received a SIGTERM (all processes get the same answer)."""
    local = _flag.is_set()
    if process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray([local]))))
