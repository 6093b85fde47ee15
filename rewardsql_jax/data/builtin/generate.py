"""Generator of the embedded default benchmark: SQLite databases + templated questions, no download.

Layout written under `root` (Spider-style databases, BIRD-style question files):
    database/<db_id>/<db_id>.sqlite
    train.json, test.json   [{"question_id", "db_id", "question", "evidence", "SQL", "difficulty", "kind"}]
Train databases use every domain under naming 0; test databases are fresh instances (other
rows, other db_ids) under naming 1 (other table/column names), so the test split is held out
by database, content and schema spelling. Everything is drawn from `random.Random` seeded by
(seed, db_id): the same arguments give the same files byte for byte.
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rewardsql_jax.data.builtin.domains import DOMAINS
from rewardsql_jax.data.builtin.instance import DbInstance, generate_instance, write_sqlite
from rewardsql_jax.data.builtin.questions import TEMPLATES
from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.layout import sqlite_path


@dataclass(frozen=True)
class BuiltinQuestion:
    """A generated question and the template it came from."""

    example: Example
    kind: str


def _execute(conn: sqlite3.Connection, sql: str) -> list | None:
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return None


def _questions(inst: DbInstance, db_path: Path, n: int, rng: random.Random, start_id: int) -> list[BuiltinQuestion]:
    """Up to `n` distinct verified questions, cycling through the templates in shuffled rounds."""
    out, seen = [], set()
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        for _round in range(max(4, 4 * n // len(TEMPLATES) + 4)):
            order = list(TEMPLATES)
            rng.shuffle(order)
            for kind, difficulty, template in order:
                if len(out) >= n:
                    return out
                question, sql = template(inst, rng)
                if sql in seen:
                    continue
                seen.add(sql)
                rows = _execute(conn, sql)
                if not rows or all(v is None for row in rows for v in row):
                    continue  # gold must execute and return something
                out.append(
                    BuiltinQuestion(
                        Example(
                            question_id=start_id + len(out),
                            db_id=inst.db_id,
                            question=question,
                            evidence="",
                            gold_sql=sql,
                            difficulty=difficulty,
                            db_path=str(db_path),
                        ),
                        kind,
                    )
                )
    finally:
        conn.close()
    return out


def generate_split(
    root: Path, db_specs: list[tuple[str, int, int]], seed: int, questions_per_db: int, start_id: int = 0
) -> list[BuiltinQuestion]:
    """Write the databases of one split and return their questions. db_specs: (db_id, domain index, naming)."""
    questions: list[BuiltinQuestion] = []
    for db_id, domain_index, naming in db_specs:
        rng = random.Random(f"rewardsql_jax.builtin:{seed}:{db_id}")
        inst = generate_instance(db_id, DOMAINS[domain_index], naming, rng)
        path = sqlite_path(root / "database", db_id)
        write_sqlite(inst, path)
        questions += _questions(inst, path, questions_per_db, rng, start_id + len(questions))
    return questions


def _write_json(path: Path, questions: list[BuiltinQuestion]) -> None:
    records = [
        {
            "question_id": q.example.question_id,
            "db_id": q.example.db_id,
            "question": q.example.question,
            "evidence": q.example.evidence,
            "SQL": q.example.gold_sql,
            "difficulty": q.example.difficulty,
            "kind": q.kind,
        }
        for q in questions
    ]
    path.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def make_builtin_benchmark(
    root: str | Path,
    *,
    seed: int = 0,
    n_train_dbs: int = 12,
    n_test_dbs: int = 6,
    questions_per_db: int = 40,
    rename_test_schemas: bool = True,
) -> tuple[Benchmark, Benchmark]:
    """Generate (train, test) Benchmarks under `root`; deterministic in all arguments.

    Train db k uses domain k mod 6 with naming 0; test db k uses domain k mod 6 with naming 1.
    db_ids are `<domain>_<index>` with indices running on from train into test, so the two
    splits never share a database. Every gold SQL was executed at generation time and returned
    a non-empty result. Also writes train.json / test.json (with each question's template kind).
    ``rename_test_schemas=False`` keeps naming 0 for the test databases: still held-out databases
    (other rows, other db_ids) but with the table/column names seen in training, an easier split
    for small models trained from scratch.
    """
    for name, value in (
        ("n_train_dbs", n_train_dbs),
        ("n_test_dbs", n_test_dbs),
        ("questions_per_db", questions_per_db),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n_dom = len(DOMAINS)
    train_specs = [(f"{DOMAINS[k % n_dom].name}_{k}", k % n_dom, 0) for k in range(n_train_dbs)]
    test_naming = 1 if rename_test_schemas else 0
    test_specs = [(f"{DOMAINS[k % n_dom].name}_{n_train_dbs + k}", k % n_dom, test_naming) for k in range(n_test_dbs)]
    train = generate_split(root, train_specs, seed, questions_per_db)
    test = generate_split(root, test_specs, seed, questions_per_db, start_id=len(train))
    _write_json(root / "train.json", train)
    _write_json(root / "test.json", test)
    db_root = str(root / "database")
    return (
        Benchmark("builtin:train", tuple(q.example for q in train), db_root),
        Benchmark("builtin:test", tuple(q.example for q in test), db_root),
    )


def builtin_kinds(root: str | Path, split: str = "train") -> dict[int, str]:
    """{question_id: template kind} read back from a generated split's JSON file."""
    records = json.loads((Path(root) / f"{split}.json").read_text(encoding="utf-8"))
    return {r["question_id"]: r["kind"] for r in records}
