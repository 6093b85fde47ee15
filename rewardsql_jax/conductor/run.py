"""SQLConductor's entry point: ``python launch/run.py --config configs/conductor_default.py`` (``launch/run.py``
dispatches here when ``config.pipeline == "conductor"``).

``run_conductor(config) -> results`` runs search-to-policy training and online inference on the built-in
benchmark (SQLConductor Figure 2; the steps are in ``pipeline.py``); ``print_summary`` prints the EX table
(``report.summary_lines``). A rerun of a killed run resumes its trainers from their checkpoints in
``run_dir/checkpoints/``.

With several processes every process computes the same run from the same seeds; the primary writes ``run_dir``,
the others a private scratch directory. A rerun of a killed multi-process run resumes on every process alike:
first every process checks ``run_dir``'s finished stages against its settings (``check_finished_stages``: all
refuse changed settings, or none), then each non-primary process copies into its scratch directory what the
stages read back from ``run_dir`` (``restore_finished``: the folders of the finished stages, those with
``metrics.json``, the tokenizer, the reasoning cache and the evaluation's per-method records), and after a barrier
(so the primary writes nothing while they copy) they run: every process skips the same stages and reads back the
same outputs as the primary, and logs its ``already done ... skipping`` lines. The other processes must see
``run_dir`` (a shared filesystem, as a pod's run directory is); one that does not finds nothing to restore and
recomputes those stages. Multi-process runs do not checkpoint inside a stage (``ConductorRun.trainer``), so they
resume at the start of the stage that was killed.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary, process_index

from .config import ConductorRunConfig
from .context import STAGES, check_finished_stages
from .evaluation.report import summary_lines
from .pipeline import run_stages


def run_conductor(config: ConductorRunConfig, *, log=tqdm.write) -> dict:
    """Run the whole SQLConductor method for ``config``; returns the results dict (also in run_dir/results.json)."""
    if not isinstance(config, ConductorRunConfig):
        raise ValueError(
            f"run_conductor needs a ConductorRunConfig (configs/conductor_*.py), got {type(config).__name__}"
        )
    # every process refuses a rerun with changed settings alike, before any of them copies or runs anything
    check_finished_stages(config, Path(config.run_dir))
    if is_primary():
        barrier("conductor restored")  # the others copy run_dir's finished stages: write nothing meanwhile
        results = run_stages(config, log=log)
    else:
        # Its models are small: every process computes the same run from the same seeds on its own devices (no
        # work is split yet); the others write into a private scratch directory, the primary alone into run_dir.
        with tempfile.TemporaryDirectory(prefix="conductor_") as scratch:
            restored = restore_finished(Path(config.run_dir), Path(scratch))
            if restored:
                log(f"[conductor] process {process_index()}: restored {', '.join(restored)} from {config.run_dir}")
            barrier("conductor restored")
            results = run_stages(dataclasses.replace(config, run_dir=scratch), log=_resume_lines(log))
    barrier("conductor finished")
    return results


def restore_finished(run_dir: Path, scratch: Path) -> list[str]:
    """Copy from ``run_dir`` into ``scratch`` everything a rerun reads back instead of computing: the folders of
    the finished stages (``metrics.json``: the action model, ``searches.pkl``, ``curated.pkl``, the policies),
    the saved tokenizer, the reasoning cache and the evaluation's finished ``<method>.jsonl``. Returns the finished
    stages restored."""
    done = [stage for stage in STAGES if (run_dir / stage / "metrics.json").exists()]
    for stage in done:
        shutil.copytree(run_dir / stage, scratch / stage, dirs_exist_ok=True)
    if (run_dir / "tokenizer").is_dir():
        shutil.copytree(run_dir / "tokenizer", scratch / "tokenizer", dirs_exist_ok=True)
    if (run_dir / "reasoning_cache.json").exists():
        shutil.copy2(run_dir / "reasoning_cache.json", scratch / "reasoning_cache.json")
    if "evaluation" not in done:
        for records in (run_dir / "evaluation").glob("*.jsonl"):
            (scratch / "evaluation").mkdir(parents=True, exist_ok=True)
            shutil.copy2(records, scratch / "evaluation" / records.name)
    return done


def _resume_lines(log):
    """The non-primary processes' log: only which stages they skip (the primary prints everything else)."""
    return lambda line, *_: log(line) if "(resume): skipping" in line else None


def print_summary(config: ConductorRunConfig, results: dict) -> None:
    print("\n".join(summary_lines(results)))


__all__ = ["print_summary", "restore_finished", "run_conductor", "summary_lines"]
