"""Records shared by every text-to-SQL dataset: one question (`Example`) and a loaded split (`Benchmark`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """One text-to-SQL question with its gold SQL and the SQLite file it runs on.

    `difficulty` is the benchmark's own label: BIRD simple/moderate/challenging, Spider
    easy/medium/hard/extra (computed, see `spider_hardness`), built-in simple/moderate/challenging.
    `evidence` is BIRD's external knowledge hint ("" when the benchmark has none).
    `db_path` is where the database is expected; it may be absent when a loader ran with
    `require_db=False`.
    """

    question_id: int
    db_id: str
    question: str
    evidence: str
    gold_sql: str
    difficulty: str
    db_path: str

    def __post_init__(self):
        if not isinstance(self.question_id, int) or isinstance(self.question_id, bool):
            raise TypeError(f"question_id must be an int, got {self.question_id!r}")
        for name in ("db_id", "question", "gold_sql", "difficulty", "db_path"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"Example.{name} must be a non-empty string, got {value!r} (question_id={self.question_id})"
                )
        if not isinstance(self.evidence, str):
            raise TypeError(f"Example.evidence must be a string ('' when absent), got {self.evidence!r}")


@dataclass(frozen=True)
class Benchmark:
    """A loaded split: its examples, the folder holding the databases, and what was skipped.

    `missing_dbs` lists db_ids whose SQLite file was absent; `n_skipped` counts the questions
    dropped because of them (0 when the loader kept them, i.e. `require_db=False`).
    """

    name: str
    examples: tuple[Example, ...]
    db_root: str
    missing_dbs: tuple[str, ...] = ()
    n_skipped: int = 0

    def __post_init__(self):
        if not self.name:
            raise ValueError("Benchmark.name must be non-empty")
        if not isinstance(self.examples, tuple) or not all(isinstance(e, Example) for e in self.examples):
            raise TypeError("Benchmark.examples must be a tuple of Example")
        if self.n_skipped < 0:
            raise ValueError(f"Benchmark.n_skipped must be >= 0, got {self.n_skipped}")

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self):
        return iter(self.examples)

    @property
    def db_ids(self) -> tuple[str, ...]:
        """Distinct db_ids of the examples, in first-seen order."""
        return tuple(dict.fromkeys(e.db_id for e in self.examples))

    def difficulty_counts(self) -> dict[str, int]:
        """Number of examples per difficulty label."""
        return dict(Counter(e.difficulty for e in self.examples))

    def summary(self) -> str:
        """One line: name, sizes, difficulty split and missing databases."""
        parts = [f"{self.name}: {len(self.examples)} questions on {len(self.db_ids)} databases"]
        counts = self.difficulty_counts()
        if counts:
            parts.append(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if self.missing_dbs:
            parts.append(
                f"missing databases ({len(self.missing_dbs)}): {', '.join(self.missing_dbs)}; "
                f"{self.n_skipped} questions skipped"
            )
        return "; ".join(parts)
