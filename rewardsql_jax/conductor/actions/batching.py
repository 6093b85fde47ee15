"""Batch language-model calls across concurrent episodes (host-side scheduling, no paper counterpart).

Episodes (MCTS searches, rollouts, online inference) are plain sequential Python, one per thread. Each
model call blocks its thread; when every live thread is blocked, the pending requests are grouped by
model and run as one batched ``generate`` per model, ordered by thread index, so a run is deterministic
for a fixed set of episodes. This turns hundreds of batch-1 decodes into a few large ones on CPU.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from tqdm.auto import tqdm


@dataclasses.dataclass
class _Request:
    worker: int
    kind: str
    payload: object
    result: object = None
    done: bool = False


class CallBatcher:
    """``run(jobs)`` runs ``jobs[i](call)`` in threads; ``call(kind, payload)`` inside a job is batched.

    ``handlers[kind](payloads) -> results`` serves one batch of one model (same order as payloads).
    """

    def __init__(self, handlers: dict[str, Callable[[list], list]]):
        self.handlers = handlers
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._active = 0
        self._error: BaseException | None = None
        self._bar = None
        self.rounds = 0  # batched rounds served (one per flush)

    def _flush(self) -> None:
        pending, self._pending = sorted(self._pending, key=lambda r: r.worker), []
        self.rounds += 1
        if self._bar is not None:
            self._bar.set_postfix(round=self.rounds, calls=len(pending), refresh=False)
        try:
            for kind in sorted({r.kind for r in pending}):
                group = [r for r in pending if r.kind == kind]
                results = self.handlers[kind]([r.payload for r in group])
                for r, res in zip(group, results):
                    r.result = res
        except BaseException as e:  # surface the model error in every waiting thread
            self._error = e
        for r in pending:
            r.done = True
        self._cond.notify_all()

    def _call(self, worker: int, kind: str, payload):
        if kind not in self.handlers:
            raise ValueError(f"no model registered for call kind {kind!r}; known: {sorted(self.handlers)}")
        req = _Request(worker, kind, payload)
        with self._cond:
            self._pending.append(req)
            if len(self._pending) == self._active:
                self._flush()
            while not req.done:
                self._cond.wait()
            if self._error is not None:
                raise RuntimeError(f"batched {kind} call failed: {self._error}") from self._error
        return req.result

    def _leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._bar is not None:
                self._bar.update(1)
            if self._pending and len(self._pending) == self._active:
                self._flush()

    def run(self, jobs: list[Callable], desc: str | None = None) -> list:
        """Run every ``job(call)`` concurrently; returns their results in order (re-raises the first error).
        ``desc``: show a progress bar of finished jobs (episodes) under that name, with the batched rounds served."""
        results, errors = [None] * len(jobs), [None] * len(jobs)
        self._active = len(jobs)
        self._bar = None if desc is None else tqdm(total=len(jobs), desc=desc, unit="episode", dynamic_ncols=True)

        def work(i):
            try:
                results[i] = jobs[i](lambda kind, payload: self._call(i, kind, payload))
            except BaseException as e:  # re-raised below in the caller's thread
                errors[i] = e
            finally:
                self._leave()

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return results
