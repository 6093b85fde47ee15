"""Per-step metrics out of a training loop: a one-line summary and TensorBoard scalar event files.

``ScalarLog(logdir)`` writes one event file per run name (``logdir/sft``, ``logdir/rl``, ...) with the
``tensorboard`` package's own writer and protos (no TensorFlow); view with ``tensorboard --logdir logdir``.
Only numeric scalars are written (nested dicts flatten to ``a/b`` tags; strings, bools, lists are skipped),
so the JSONL log stays the complete record and TensorBoard the plottable part of it.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping
from pathlib import Path

_SKIP = ("step", "stage")


def scalar_fields(record: Mapping, prefix: str = "") -> dict[str, float]:
    """The numeric scalar fields of ``record`` as ``{tag: float}`` (nested mappings give ``outer/inner`` tags).

    Bools, strings, None, lists and arrays are skipped, and so are the top-level ``step`` and ``stage`` keys.
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        if not prefix and key in _SKIP:
            continue
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalar_fields(value, f"{tag}/"))
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[tag] = float(value)
    return out


def summary_line(record: Mapping) -> str:
    """``"[sft] step 10: loss=0.4210 grad_norm=1.203"``: one printed line per logged step."""
    fields = " ".join(f"{k}={_short(v)}" for k, v in scalar_fields(record).items())
    head = f"[{record['stage']}] " if "stage" in record else ""
    return f"{head}step {record['step']}: {fields}" if "step" in record else f"{head}{fields}"


def _short(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"


class ScalarLog:
    """TensorBoard scalar summaries under ``logdir``, one sub-directory (a TensorBoard run) per name.

    Each ``write`` is flushed to disk, so a live ``tensorboard --logdir`` sees it and a crash loses nothing.
    """

    def __init__(self, logdir: str | Path):
        self.logdir = Path(logdir)
        self._writers: dict = {}
        self._last_step: dict[str, int] = {}

    def write(self, run: str, record: Mapping, *, step: int | None = None, prefix: str = "") -> int:
        """Write ``record``'s numeric scalars (tag = ``prefix`` + field name) to ``run`` at ``step``.

        ``step`` defaults to ``record["step"]``, else the run's last written step (0 for a new run), so a
        stage's final metrics land at its last training step. Returns the number of scalars written.
        """
        if step is None:
            step = record.get("step", self._last_step.get(run, 0))
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise ValueError(f"TensorBoard step must be an int, got {step!r} in run {run!r}")
        fields = scalar_fields(record, prefix)
        if not fields:
            return 0
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=tag, simple_value=v) for tag, v in fields.items()]
        writer = self._writer(run)
        writer.add_event(Event(wall_time=time.time(), step=int(step), summary=Summary(value=values)))
        writer.flush()
        self._last_step[run] = max(int(step), self._last_step.get(run, int(step)))
        return len(values)

    def _writer(self, run: str):
        if run not in self._writers:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            path = self.logdir / run
            path.mkdir(parents=True, exist_ok=True)
            self._writers[run] = EventFileWriter(str(path))
        return self._writers[run]

    def flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    def __enter__(self) -> ScalarLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
