"""What a long stage has already computed, kept as each group of questions finishes, so that rerunning the stage
after a kill or a preemption continues inside it instead of starting over (a stage is otherwise resumed only as a
whole: ``RunContext.is_done``).

A part (say the SFT policy's greedy SQL) is a JSONL file per process, ``<folder>/<name>.p<process>.jsonl``: its first
line is the part's ``key`` (every setting its results depend on: the model's identity, decoding settings, seeds),
then one line per question, ``{"i", "question_id", "value"}``. A log whose key differs from the current one is
ignored and overwritten; a line cut short by a kill ends what is read. Results are reused only for the same
question at the same index, and whole groups (``runs``) are recomputed together, so a resumed part holds what one
uninterrupted run would have held: greedy decoding is deterministic and every sample is seeded by its question.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rewardsql_jax.distributed import process_index


class PartLog:
    """The results of one part of a stage for the questions of ``records`` (see the module docstring)."""

    def __init__(self, folder: Path, name: str, key: dict, records: list[dict]):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.p{process_index()}.jsonl"
        self._key_line = json.dumps(key, sort_keys=True)
        self.done: dict[int, Any] = {}
        own: list[str] = []
        for path in sorted(folder.glob(f"{name}.p*.jsonl")):
            lines = _whole_lines(path)
            if not lines or lines[0][0] != self._key_line:
                continue
            for line, item in lines[1:]:
                i = item["i"]
                if i < len(records) and records[i]["question_id"] == item["question_id"]:
                    self.done[i] = item["value"]
                    if path == self.path:
                        own.append(line)
        # this process's file rewritten whole: a stale key or a torn last line must not precede what is appended
        self.path.write_text("".join(f"{line}\n" for line in (self._key_line, *own)))
        self._records = records

    def pending(self, runs: Iterable[list[int]]) -> list[list[int]]:
        """The ``runs`` (groups of question indices computed together) with a question not yet done."""
        return [run for run in runs if any(i not in self.done for i in run)]

    def add(self, values: dict[int, Any]) -> None:
        """Record question index -> result (JSON-serialisable), on disk before returning."""
        with open(self.path, "a") as f:
            for i, value in values.items():
                f.write(json.dumps({"i": i, "question_id": self._records[i]["question_id"], "value": value}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.update(values)


def resumed_runs(
    log: PartLog, runs: list[list[int]], compute: Callable[[list[int]], dict[int, Any]], desc: str
) -> dict[int, Any]:
    """Question index -> result for every question of ``runs``: those of ``log`` as they are, the runs still pending
    computed by ``compute(run)`` (question index -> result) and recorded in ``log`` as each one finishes."""
    for run in tqdm(log.pending(runs), desc=desc):
        log.add(compute(run))
    return {i: log.done[i] for run in runs for i in run}


def _whole_lines(path: Path) -> list[tuple[str, Any]]:
    """The lines of ``path`` with their JSON, up to the first one that is not whole JSON (a write cut short)."""
    out = []
    for line in path.read_text().split("\n"):
        try:
            out.append((line, json.loads(line)))
        except json.JSONDecodeError:
            break
    return out
