"""XLA's compiled programs kept on disk between stages, runs and processes.

Every stage of a run compiles the same model's sampler and train steps for its shapes, and a second run (another
seed, a resumed run, the other process of a two-process launch) compiles them all again. With the persistent
compilation cache a program XLA has compiled once (same computation, shapes and device) is read back instead: on a
2-core CPU the smoke config's stages take 17 s instead of 45 s the second time, with identical metrics
(benchmarks/RESULTS.md). ``launch/run.py`` turns it on (``--compilation-cache DIR``; ``''`` turns it off).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

DEFAULT_DIR = "~/.cache/rewardsql_jax/xla"
ENV_DIR = "REWARDSQL_COMPILATION_CACHE"  # overrides DEFAULT_DIR; '' turns the cache off
MAX_BYTES = 4 * 1024**3  # least recently used programs are evicted past this
MIN_COMPILE_SECONDS = 0.2  # programs that compile faster are not worth a file
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def default_cache_dir() -> str:
    """``$REWARDSQL_COMPILATION_CACHE`` when set (``''``: off), else ``~/.cache/rewardsql_jax/xla``."""
    return os.environ.get(ENV_DIR, DEFAULT_DIR)


def cache_directory(directory: str) -> Path | None:
    """``directory`` expanded and created (None for ``''``: the cache off). One that cannot be created raises
    ValueError saying which and what to do."""
    if not directory:
        return None
    path = Path(directory).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(
            f"cannot create the compilation cache directory {path} ({e.strerror}); give a writable one with "
            f"--compilation-cache DIR or turn it off with --compilation-cache ''"
        ) from None
    return path


def use_compilation_cache(path: Path | None) -> Path | None:
    """Keep compiled programs in ``path`` (``cache_directory``) from now on; None leaves the cache off. A directory
    JAX was already given (``JAX_COMPILATION_CACHE_DIR``) wins. Call before the first compilation and after joining
    the other processes of a launch: with several processes it stays off, because an executable read back there
    rounded differently from the one compiled in the run it resumes (a 2-process LoRA run resumed after SIGTERM
    was not bit-identical with the cache, and is without it). Returns the directory in use, or None."""
    current = jax.config.values["jax_compilation_cache_dir"]
    if current:
        return Path(current)
    if path is None or jax.distributed.is_initialized():  # (not process_count(): it would start the backend)
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    if MIN_COMPILE_ENV not in os.environ:  # JAX's own setting wins
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
