"""SQLConductor's entry point: ``python launch/run.py --config configs/conductor_default.py`` (``launch/run.py``
dispatches here when ``config.pipeline == "conductor"``).

``run_conductor(config) -> results`` runs search-to-policy training and online inference on the built-in
benchmark (SQLConductor Figure 2; the steps are in ``pipeline.py``); ``print_summary`` prints the EX table
(``report.summary_lines``). A rerun of a killed run resumes its trainers from their checkpoints in
``run_dir/checkpoints/``.
"""

from __future__ import annotations

import dataclasses
import tempfile

from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary

from .config import ConductorRunConfig
from .evaluation.report import summary_lines
from .pipeline import run_stages


def run_conductor(config: ConductorRunConfig, *, log=tqdm.write) -> dict:
    """Run the whole SQLConductor method for ``config``; returns the results dict (also in run_dir/results.json)."""
    if not isinstance(config, ConductorRunConfig):
        raise ValueError(
            f"run_conductor needs a ConductorRunConfig (configs/conductor_*.py), got {type(config).__name__}"
        )
    if is_primary():
        results = run_stages(config, log=log)
    else:
        # Its models are small: every process computes the same run from the same seeds on its own devices (no
        # work is split yet); the others write into a private scratch directory, the primary alone into run_dir.
        with tempfile.TemporaryDirectory(prefix="conductor_") as scratch:
            results = run_stages(dataclasses.replace(config, run_dir=scratch), log=lambda *_: None)
    barrier("conductor finished")
    return results


def print_summary(config: ConductorRunConfig, results: dict) -> None:
    print("\n".join(summary_lines(results)))


__all__ = ["print_summary", "run_conductor", "summary_lines"]
