"""What every stage shares: the run directory, its artefacts, resume markers, the SQL pool, the tokenizer.

Each stage writes its artefacts under ``run_dir/<stage>/`` and, when it has finished, ``metrics.json``
there; a stage whose ``metrics.json`` exists is skipped on a rerun (resume). Stages hand models to each
other as HF directories (``save_pretrained``), so every intermediate model is loadable by transformers.
Per-step records go to ``run_dir/log.jsonl`` and their numeric scalars to ``run_dir/tensorboard/<stage>``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from rewardsql_jax.config import save_config
from rewardsql_jax.distributed import barrier, is_primary, speaker
from rewardsql_jax.training.metrics_log import ScalarLog, summary_line
from rewardsql_jax.training.step_checkpoints import StepCheckpoints

from .run_config import STAGES, RunConfig
from .stage_config import stage_settings

if TYPE_CHECKING:
    from rewardsql_jax.sql import ExecutorPool


class StageDirs:
    """A run's stage directories, ``run_dir/<stage>/``, and their done marker ``metrics.json`` (the Reward-SQL
    stages' and SQLConductor's)."""

    run_dir: Path

    def stage_dir(self, stage: str) -> Path:
        path = self.run_dir / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def is_done(self, stage: str) -> bool:
        return (self.run_dir / stage / "metrics.json").exists()


@dataclasses.dataclass
class RunContext(StageDirs):
    """Mutable per-run handles (the config itself stays frozen)."""

    config: RunConfig
    run_dir: Path
    _pool: ExecutorPool | None = None
    _tokenizer: object = None
    _scalars: ScalarLog | None = None
    _started: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def create(cls, config: RunConfig) -> RunContext:
        run_dir = Path(config.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if is_primary():
            save_config(config, run_dir / "config.json")
        return cls(config=config, run_dir=run_dir)

    def begin(self, stage: str) -> None:
        """Start ``stage``'s clock: its metrics get ``wall_seconds``, the wall time of the run that finished it."""
        self._started[stage] = time.perf_counter()

    def finish(self, stage: str, metrics: dict) -> dict:
        """Write the stage's metrics (marks it done for resume), append them to the run's JSONL log and write
        their numeric scalars to TensorBoard as ``final/<name>`` at the stage's last logged step."""
        started = self._started.get(stage)
        metrics = {
            "stage": stage,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **({"wall_seconds": round(time.perf_counter() - started, 1)} if started is not None else {}),
            **metrics,
            "settings": stage_settings(self.config, stage) if stage in STAGES else {},
        }
        if is_primary():
            (self.stage_dir(stage) / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float))
            self.log(metrics)
            # the recorded settings are config, not results: not TensorBoard scalars
            self.scalars().write(stage, {k: v for k, v in metrics.items() if k != "settings"}, prefix="final/")
        barrier(f"finished {stage}")
        return metrics

    def metrics(self, stage: str) -> dict:
        path = self.run_dir / stage / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(
                f"stage {stage!r} has not finished in {self.run_dir}; run it first (stages={list(self.config.stages)})"
            )
        return json.loads(path.read_text())

    def log(self, record: dict) -> None:
        """Append ``record`` to ``log.jsonl``; a record with a ``step`` is also printed as one line and its
        numeric scalars go to ``tensorboard/<record["stage"]>``."""
        if not is_primary():  # one process writes the run's log; the others would repeat it
            return
        with open(self.run_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record, default=float) + "\n")
        if "step" in record:
            tqdm.write(speaker() + summary_line(record))
            self.scalars().write(record.get("stage", "run"), record)

    def fit_options(self, stage: str, *, steps: int, checkpoint_every: int = 0, log_every: int = 10) -> dict:
        """``training.fit`` settings of a supervised stage: its progress label, its log records, and Orbax
        checkpoints under ``<stage>/checkpoint`` when ``checkpoint_every`` > 0 (then a rerun resumes the stage)."""
        return dict(
            steps=steps,
            desc=stage,
            log_every=log_every,
            log=lambda rec: self.log({"stage": stage, **rec}),
            checkpoints=StepCheckpoints(self.stage_dir(stage), name=stage) if checkpoint_every else None,
            checkpoint_every=checkpoint_every,
        )

    def scalars(self) -> ScalarLog:
        """The run's TensorBoard writer (``tensorboard --logdir run_dir/tensorboard``)."""
        if self._scalars is None:
            self._scalars = ScalarLog(self.run_dir / "tensorboard")
        return self._scalars

    def require(self, stage: str, artefact: str) -> Path:
        """Path of an artefact another stage made, with a clear error if it is missing."""
        path = self.run_dir / stage / artefact
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: stage {stage!r} must run before this one "
                f"(add it to stages, or point run_dir at a run that has it)"
            )
        return path

    def stored_path(self, path) -> str:
        """How a file path is written into the run's artefacts: relative to the run directory when it lies
        inside it (the run directory can be moved or resumed from any working directory), else absolute."""
        path = Path(path).resolve()
        try:
            return str(path.relative_to(self.run_dir.resolve()))
        except ValueError:
            return str(path)

    def resolved_path(self, stored: str) -> str:
        """The absolute path of a path written by ``stored_path`` (relative ones are inside the run directory)."""
        path = Path(stored)
        return str(path if path.is_absolute() else (self.run_dir / path).resolve())

    def records(self, stage: str, artefact: str) -> list[dict]:
        """The JSONL records of ``stage/artefact`` with every ``db_path`` resolved to an absolute path."""
        with open(self.require(stage, artefact)) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for r in rows:
            if "db_path" in r:
                r["db_path"] = self.resolved_path(r["db_path"])
        return rows

    def pool(self):
        """The run's SQL executor pool (started once, reused by every stage)."""
        if self._pool is None:
            from rewardsql_jax.sql import ExecutorPool

            self._pool = ExecutorPool(workers=self.config.workers)
        return self._pool

    def tokenizer(self):
        if self._tokenizer is None:
            from rewardsql_jax.data.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.require("cold_start", "tokenizer"))
        return self._tokenizer

    def mesh(self):
        """The configured device mesh, or None on a single device (no sharding needed)."""
        import jax

        if len(jax.devices()) == 1:
            return None
        from rewardsql_jax.models.sharding import make_mesh

        m = self.config.mesh
        return make_mesh(data=m.data, fsdp=m.fsdp, tensor=m.tensor)

    def host_mesh(self):
        """The mesh of the sampling and scoring stages over this process's own devices, or None (one device).

        Each process answers its own share of the questions (DESIGN.md, "Sampling on a pod"), so the models it
        samples or scores with are sharded over its local devices only: every weight split over all of them
        (fsdp, with the configured ``mesh.tensor`` when it divides them) by the training rules, and the batch
        rows spread over the same devices."""
        import jax

        from rewardsql_jax.models.sharding import make_mesh

        devices = jax.local_devices()
        if len(devices) == 1:
            return None
        tensor = self.config.mesh.tensor if len(devices) % self.config.mesh.tensor == 0 else 1
        return make_mesh(data=1, fsdp=-1, tensor=tensor, devices=devices)

    def close(self) -> None:
        if self._scalars is not None:
            self._scalars.close()
            self._scalars = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
