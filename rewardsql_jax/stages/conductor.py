"""SQLConductor pipeline entry point (dispatched by ``launch/run.py`` when ``config.pipeline == "conductor"``).

``run_conductor(config) -> results`` runs search-to-policy training and online inference on the built-in
benchmark (see ``rewardsql_jax.conductor.pipeline``); ``summary_lines(results)`` is the printed EX table.
"""
from __future__ import annotations

import dataclasses
import tempfile

from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary

from rewardsql_jax.conductor.config import ConductorRunConfig
from rewardsql_jax.conductor.pipeline import run_conductor as _run
from rewardsql_jax.conductor.report import summary_lines


def run_conductor(config: ConductorRunConfig, *, log=tqdm.write) -> dict:
    """Run the whole SQLConductor method for ``config``; returns the results dict (also in run_dir/results.json)."""
    if not isinstance(config, ConductorRunConfig):
        raise ValueError(f"run_conductor needs a ConductorRunConfig (configs/conductor_*.py), got {type(config).__name__}")
    if is_primary():
        results = _run(config, log=log)
    else:
        # Its models are small and unsharded: every process computes the same run from the same seeds (no work is
        # split yet); the others write into a private scratch directory, the primary alone into run_dir.
        with tempfile.TemporaryDirectory(prefix="conductor_") as scratch:
            results = _run(dataclasses.replace(config, run_dir=scratch), log=lambda *_: None)
    barrier("conductor finished")
    return results


def print_summary(config, results: dict) -> None:
    print("\n".join(summary_lines(results)))


__all__ = ["run_conductor", "summary_lines", "print_summary"]
