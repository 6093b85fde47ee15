"""Process pool that executes many (db, sql) jobs in the sandbox (host side of every execution reward).

RL steps execute thousands of generated queries; the papers' rewards (Reward-SQL outcome reward,
EXPO-SQL clause rewards, SQLConductor ExecF1) all need them. :class:`ExecutorPool` runs them in
worker *processes* (a SQLite query holds the GIL, and a crash must not take the trainer down):

* workers are started with ``forkserver`` (or ``spawn``), never ``fork``: the parent usually has
  JAX initialised, and forking a process with live XLA threads can deadlock;
* each worker keeps an LRU cache of sandboxed read-only connections, one per database file;
* jobs go out in small chunks, results come back one by one, so when a worker dies (segfault,
  ``os._exit``, SIGKILL, OOM killer) the job it was running is known: it is retried once on a
  fresh worker and, if it kills that one too, reported as ``ExecResult(ok=False, error="worker
  crashed ...")``. A worker stuck past ``timeout_s + hang_grace_s`` (the in-process deadline
  failed) is killed and its job reported as ``"worker hung ..."``. Nothing is lost silently;
* the parent keeps an LRU cache of results keyed by (db file, mtime, sql, max_rows, text_errors),
  so the repeated gold queries of RL cost one execution; timeouts and crashes are never cached.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait

from .execute import DEFAULT_MAX_ROWS, TEXT_ERRORS, ExecResult, connect_readonly, execute, run_query

_HOOK_CRASH = "--@test:crash"
_HOOK_HANG = "--@test:hang"


def _worker_main(conn, heap_limit_bytes: int, max_connections: int, test_hooks: bool) -> None:
    """Worker loop: receive job chunks, send back (job_id, ExecResult) one at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent, which kills us
    if heap_limit_bytes:
        import sqlite3

        # Process-wide cap on SQLite's own heap; only ever lowered, so it is safe to set here.
        sqlite3.connect(":memory:").execute(f"PRAGMA hard_heap_limit={int(heap_limit_bytes)}").close()
    conn.send("ready")
    cache: collections.OrderedDict = collections.OrderedDict()
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        stamps: dict = {}  # one stat() per database per chunk
        for job_id, db, sql, timeout_s, max_rows, text_errors in chunk:
            if test_hooks and isinstance(sql, str):
                if sql.startswith(_HOOK_CRASH):
                    os._exit(13)
                if sql.startswith(_HOOK_HANG):
                    time.sleep(3600)
            res = _run_cached(cache, stamps, max_connections, db, sql, timeout_s, max_rows, text_errors)
            conn.send((job_id, res))


def _run_cached(cache, stamps, max_connections, db, sql, timeout_s, max_rows, text_errors) -> ExecResult:
    try:
        if db not in stamps:
            st = os.stat(db)
            stamps[db] = (os.fspath(db), st.st_mtime_ns, st.st_ino, st.st_size)
        key = stamps[db]
    except (OSError, TypeError, ValueError):
        return execute(db, sql, timeout_s=timeout_s, max_rows=max_rows, text_errors=text_errors)
    try:
        connection = cache.pop(key) if key in cache else connect_readonly(db)
    except Exception as e:
        return ExecResult(ok=False, error=f"cannot open database {db}: {e}")
    cache[key] = connection
    while len(cache) > max_connections:
        cache.popitem(last=False)[1].close()
    return run_query(connection, sql, timeout_s=timeout_s, max_rows=max_rows, text_errors=text_errors)


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """Counters since the pool started."""

    executed: int
    cache_hits: int
    crashed: int
    hung: int
    workers_started: int


class _Worker:
    def __init__(self, ctx, args):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        self.jobs: collections.deque = collections.deque()  # job ids sent, oldest = running now
        self.head_since = 0.0
        self.method = ctx.get_start_method()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the worker reports it is up; a worker that cannot start is an error, not a crash
        loop (e.g. the main module cannot be re-imported by ``spawn``/``forkserver``)."""
        if wait([self.conn, self.proc.sentinel], timeout=timeout) and self.conn.poll():
            try:
                if self.conn.recv() == "ready":
                    return
            except (EOFError, OSError):
                pass
        self.kill()
        raise RuntimeError(
            f"an ExecutorPool worker failed to start (exit code {self.proc.exitcode}). Workers are started with "
            f"'{self.method}', which re-imports the main module: run the program from a file whose entry point "
            "is guarded by `if __name__ == '__main__':` (not from stdin), and check the worker's stderr."
        )

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5.0)
        self.conn.close()


class ExecutorPool:
    """Run ``pool.map([(db_path, sql), ...])`` on sandboxed worker processes, results in input order.

    Args:
      workers: number of processes (default ``os.cpu_count()``).
      cache_size: entries of the parent-side result LRU (0 disables caching).
      max_rows, text_errors: defaults for :meth:`map` (see :func:`~rewardsql_jax.sql.execute.execute`).
      hang_grace_s: a worker is declared hung after ``timeout_s + hang_grace_s`` on one job.
      heap_limit_bytes: ``PRAGMA hard_heap_limit`` inside each worker (0 = none).
      start_method: ``"forkserver"`` (default where available) or ``"spawn"``; ``"fork"`` is refused.
      _test_hooks: let SQL starting with ``--@test:crash`` / ``--@test:hang`` crash or hang a worker.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        cache_size: int = 65536,
        max_rows: int = DEFAULT_MAX_ROWS,
        text_errors: str = "strict",
        hang_grace_s: float = 5.0,
        heap_limit_bytes: int = 2**30,
        max_connections: int = 64,
        start_method: str | None = None,
        _test_hooks: bool = False,
    ):
        workers = (os.cpu_count() or 1) if workers is None else int(workers)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if text_errors not in TEXT_ERRORS:
            raise ValueError(f"text_errors must be one of {TEXT_ERRORS}, got {text_errors!r}")
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(
                f"start_method must be 'forkserver' or 'spawn' (fork is unsafe once JAX is "
                f"initialised), got {start_method!r}"
            )
        self._ctx = mp.get_context(start_method)
        self._args = (int(heap_limit_bytes), int(max_connections), bool(_test_hooks))
        self._n = workers
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cache_size = int(cache_size)
        self._defaults = (int(max_rows), text_errors)
        self._grace = float(hang_grace_s)
        self._counts: collections.Counter[str] = collections.Counter()
        self._workers: list[_Worker] = []
        self._closed = False
        self._lock = threading.Lock()  # one map() at a time
        self._workers = [self._spawn(wait=False) for _ in range(workers)]
        try:
            for w in self._workers:
                w.wait_ready()
        except RuntimeError:
            self.close()
            raise

    def _spawn(self, wait: bool = True) -> _Worker:
        self._counts["workers_started"] += 1
        worker = _Worker(self._ctx, self._args)
        if wait:
            worker.wait_ready()
        return worker

    # -- public API ---------------------------------------------------------------------------
    @property
    def worker_pids(self) -> list[int]:
        """PIDs of the current worker processes (a replaced worker gets a new PID)."""
        return [w.proc.pid for w in self._workers]

    @property
    def stats(self) -> PoolStats:
        """Executions, cache hits, crashed/hung jobs and workers started since construction."""
        c = self._counts
        return PoolStats(c["executed"], c["cache_hits"], c["crashed"], c["hung"], c["workers_started"])

    def clear_cache(self) -> None:
        """Drop every cached result (e.g. after replacing a database file in place)."""
        self._cache.clear()

    def map(
        self,
        jobs,
        *,
        timeout_s: float = 30.0,
        max_rows: int | None = None,
        text_errors: str | None = None,
        progress: bool | str = False,
    ) -> list[ExecResult]:
        """Execute ``[(db_path, sql), ...]`` and return one :class:`ExecResult` per job, in input order.

        Never raises for bad SQL or databases (those are error results). ``progress=True`` (or a
        description string) shows a tqdm bar. Identical jobs run once per call and, unless the pool
        was built with ``cache_size=0``, once per pool lifetime.
        """
        if self._closed:
            raise RuntimeError("ExecutorPool is closed; create a new pool")
        max_rows = self._defaults[0] if max_rows is None else int(max_rows)
        text_errors = self._defaults[1] if text_errors is None else text_errors
        if text_errors not in TEXT_ERRORS:
            raise ValueError(f"text_errors must be one of {TEXT_ERRORS}, got {text_errors!r}")
        jobs = list(jobs)
        for i, job in enumerate(jobs):
            if not (isinstance(job, (tuple, list)) and len(job) == 2):
                raise ValueError(f"job {i} must be a (db_path, sql) pair, got {job!r:.80}")
        results: list[ExecResult | None] = [None] * len(jobs)
        bar = _progress_bar(progress, len(jobs))
        stamps: dict = {}
        todo: dict[tuple, list[int]] = {}
        for i, (db, sql) in enumerate(jobs):
            key = self._key(db, sql, max_rows, text_errors, stamps)
            hit = self._cache.get(key) if key is not None else None
            if hit is not None:
                self._cache.move_to_end(key)
                results[i] = hit
                self._counts["cache_hits"] += 1
                bar.update(1)
            else:
                todo.setdefault(key if key is not None else ("uncacheable", i), []).append(i)
        specs = [(jid, jobs[idx[0]][0], jobs[idx[0]][1]) for jid, idx in enumerate(todo.values())]
        with self._lock:
            try:
                outcome = self._run(specs, timeout_s, max_rows, text_errors, bar, [len(v) for v in todo.values()])
            except BaseException:  # e.g. KeyboardInterrupt: busy workers would answer stale job ids later
                for k, w in enumerate(self._workers):
                    if w.jobs:
                        w.kill()
                        self._workers[k] = self._spawn()
                bar.close()
                raise
        for (key, idx), res in zip(todo.items(), outcome):
            if key[0] != "uncacheable":
                self._remember(key, res)
            for i in idx:
                results[i] = res
        bar.close()
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for w in self._workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
        self._workers = []

    def __enter__(self) -> ExecutorPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- internals ------------------------------------------------------------------------------
    def _key(self, db, sql, max_rows, text_errors, stamps):
        if self._cache_size <= 0 or not isinstance(sql, str):
            return None
        try:
            path = os.fspath(db)
            if path not in stamps:
                st = os.stat(path)
                stamps[path] = (os.path.realpath(path), st.st_mtime_ns, st.st_size)
        except (OSError, TypeError, ValueError):
            return None
        return (*stamps[path], sql, max_rows, text_errors)

    def _remember(self, key, res: ExecResult) -> None:
        if res.timed_out or (res.error or "").startswith("worker "):
            return  # transient outcomes are not cached
        self._cache[key] = res
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _run(self, specs, timeout_s, max_rows, text_errors, bar, weights) -> list[ExecResult]:
        """Dispatch ``specs`` [(job_id, db, sql)] to the workers; handle crashes and hangs."""
        out: list[ExecResult | None] = [None] * len(specs)
        pending = collections.deque(specs)
        crashes: collections.Counter = collections.Counter()
        by_id = {s[0]: s for s in specs}
        left = len(specs)

        def finish(jid, res):
            nonlocal left
            if out[jid] is None:
                out[jid] = res
                left -= 1
                bar.update(weights[jid])

        def replace(k, why):
            w = self._workers[k]
            w.kill()
            if w.jobs:
                head = w.jobs.popleft()
                if why == "crashed" and crashes[head] == 0:
                    crashes[head] += 1
                    pending.appendleft(by_id[head])
                else:
                    self._counts[why] += 1
                    limit = f" after {timeout_s + self._grace:g} s" if why == "hung" else ""
                    finish(
                        head,
                        ExecResult(
                            ok=False,
                            error=f"worker {why}{limit} while executing this query (it was replaced)",
                            timed_out=why == "hung",
                        ),
                    )
                pending.extendleft(by_id[j] for j in reversed(w.jobs))
            self._workers[k] = self._spawn()

        while left:
            chunk = max(1, min(32, len(pending) // (4 * self._n)))
            for k, w in enumerate(self._workers):
                if pending and len(w.jobs) <= chunk:  # keep a second chunk queued so workers never idle
                    if not w.proc.is_alive():
                        replace(k, "crashed")
                        w = self._workers[k]
                    batch = [pending.popleft() for _ in range(min(chunk, len(pending)))]
                    try:
                        w.conn.send([(j, db, sql, timeout_s, max_rows, text_errors) for j, db, sql in batch])
                    except (OSError, ValueError):
                        pending.extendleft(reversed(batch))
                        replace(k, "crashed")
                        continue
                    if not w.jobs:
                        w.head_since = time.monotonic()
                    w.jobs.extend(j for j, _, _ in batch)
            busy = [w for w in self._workers if w.jobs]
            if not busy:
                if not pending:  # cannot happen; never spin forever on a bookkeeping bug
                    for jid in range(len(out)):
                        finish(jid, out[jid] or ExecResult(ok=False, error="internal error: job lost by the pool"))
                continue
            now = time.monotonic()
            next_deadline = min(w.head_since for w in busy) + timeout_s + self._grace
            ready = wait(
                [w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=max(0.0, next_deadline - now)
            )
            for k, w in enumerate(list(self._workers)):
                if not w.jobs:
                    continue
                try:
                    while w.jobs and w.conn.poll():
                        jid, res = w.conn.recv()
                        self._counts["executed"] += 1
                        finish(jid, res)
                        w.jobs.remove(jid)
                        w.head_since = time.monotonic()
                except (EOFError, OSError):
                    replace(k, "crashed")
                    continue
                if w.jobs and w.proc.sentinel in ready and not w.proc.is_alive():
                    replace(k, "crashed")
                elif w.jobs and time.monotonic() > w.head_since + timeout_s + self._grace:
                    replace(k, "hung")
        return out  # type: ignore[return-value]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(progress, total):
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=progress if isinstance(progress, str) else "sql", file=sys.stderr)
