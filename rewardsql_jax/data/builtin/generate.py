"""Generator of the embedded default benchmark: SQLite databases + templated questions, no download.

Layout written under `root` (Spider-style databases, BIRD-style question files):
    database/<db_id>/<db_id>.sqlite
    train.json, test.json   [{"question_id", "db_id", "question", "evidence", "SQL", "difficulty", "kind"}]
    rl.json                 (only when rl_questions_per_db > 0) more questions of the train databases
Train databases use every domain under naming 0; test databases are fresh instances (other
rows, other db_ids) under naming 1 (other table/column names), so the test split is held out
by database, content and schema spelling. Everything is drawn from `random.Random` seeded by
(seed, db_id): the same arguments give the same files byte for byte. The RL questions of a train
database are a seeded random share of one pool drawn with its train questions (the same template mix);
test.json is unchanged by asking for them, and their gold SQL differs from every train question's.
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path

from rewardsql_jax.data.builtin.domains import DOMAINS
from rewardsql_jax.data.builtin.instance import SCRAMBLED, DbInstance, generate_instance, write_sqlite
from rewardsql_jax.data.builtin.questions import TEMPLATES
from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.layout import sqlite_path

# the extra questions come after a database's first ones, where most draws repeat a gold SQL already drawn:
# they get this many times the rounds (1 round = 1 draw per template; about 64 cheap draws per question asked)
EXTRA_ROUND_FACTOR = 16


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


def _questions(
    inst: DbInstance,
    db_path: Path,
    n: int,
    rng: random.Random,
    start_id: int,
    seen: set | None = None,
    round_factor: int = 1,
) -> list[BuiltinQuestion]:
    """Up to `n` distinct verified questions, cycling through the templates in shuffled rounds (a bounded
    number of them, `round_factor` times the default: a template space with fewer distinct questions gives
    fewer). `seen` (updated in place) holds the gold SQL already drawn, which no new question repeats."""
    out: list = []
    seen = set() if seen is None else seen
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        for _round in range(round_factor * max(4, 4 * n // len(TEMPLATES) + 4)):
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


@dataclass(frozen=True)
class SplitQuestions:
    """The questions of one split and, per database, the extra ones drawn after them (other gold SQL)."""

    questions: list[BuiltinQuestion]
    extra: list[BuiltinQuestion]


def generate_split_questions(
    root: Path,
    db_specs: list[tuple[str, int, int]],
    seed: int,
    questions_per_db: int,
    start_id: int = 0,
    *,
    extra_per_db: int = 0,
) -> SplitQuestions:
    """Write the databases of one split; return their questions and up to `extra_per_db` extra questions per
    database. With `extra_per_db` > 0 each database's `questions_per_db + extra_per_db` distinct questions are
    drawn as one pool and a seeded random `extra_per_db` of them become the extra ones (the rest, still
    `questions_per_db`, the split's questions): both follow one template mix, and no extra question repeats a
    question's gold SQL. Extra ids count from 0 (renumber them to keep ids unique). db_specs: (db_id, domain
    index, naming)."""
    questions: list[BuiltinQuestion] = []
    extra: list[BuiltinQuestion] = []
    for db_id, domain_index, naming in db_specs:
        rng = random.Random(f"rewardsql_jax.builtin:{seed}:{db_id}")
        inst = generate_instance(db_id, DOMAINS[domain_index], naming, rng)
        path = sqlite_path(root / "database", db_id)
        write_sqlite(inst, path)
        if not extra_per_db:
            questions += _questions(inst, path, questions_per_db, rng, start_id + len(questions))
            continue
        # one pool of the same template mix, split at random: the extra questions are like the others, not the
        # leftovers of templates with many instances (small-space templates would be used up by the first draw)
        pool = _questions(inst, path, questions_per_db + extra_per_db, rng, 0, round_factor=EXTRA_ROUND_FACTOR)
        n_extra = min(extra_per_db, max(0, len(pool) - questions_per_db))
        chosen = set(rng.sample(range(len(pool)), n_extra))
        for i, q in enumerate(pool):
            into, first_id = (extra, 0) if i in chosen else (questions, start_id)
            example = replace(q.example, question_id=first_id + len(into))
            into.append(BuiltinQuestion(example, q.kind))
    return SplitQuestions(questions, extra)


def generate_split(
    root: Path, db_specs: list[tuple[str, int, int]], seed: int, questions_per_db: int, start_id: int = 0
) -> list[BuiltinQuestion]:
    """Write the databases of one split and return their questions. db_specs: (db_id, domain index, naming)."""
    return generate_split_questions(root, db_specs, seed, questions_per_db, start_id).questions


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


@dataclass(frozen=True)
class BuiltinSplits:
    """The generated splits: train, test, and the RL questions of the train databases (None when not asked)."""

    train: Benchmark
    test: Benchmark
    rl: Benchmark | None = None


def _renumbered(questions: list[BuiltinQuestion], start_id: int) -> list[BuiltinQuestion]:
    return [BuiltinQuestion(replace(q.example, question_id=start_id + i), q.kind) for i, q in enumerate(questions)]


def make_builtin_splits(
    root: str | Path,
    *,
    seed: int = 0,
    n_train_dbs: int = 12,
    n_test_dbs: int = 6,
    questions_per_db: int = 40,
    rename_test_schemas: bool = True,
    rl_questions_per_db: int = 0,
    scrambled_train_dbs: int = 0,
) -> BuiltinSplits:
    """Generate the train / test (and, when ``rl_questions_per_db > 0``, RL) splits under `root`; deterministic
    in all arguments. See ``make_builtin_benchmark`` for train / test (test byte for byte unchanged by
    ``rl_questions_per_db``).

    RL questions: ``questions_per_db + rl_questions_per_db`` distinct verified questions are drawn per train
    database and a seeded random ``rl_questions_per_db`` of them are the RL questions, the rest the train
    questions: one template mix, no gold SQL shared, questions on the databases SFT trained on that SFT did
    not see. A template space with fewer
    distinct questions gives fewer (``len(rl)`` says how many). Their ids follow the test ids; written to
    ``rl.json`` (a stale one is removed when ``rl_questions_per_db=0``).

    ``scrambled_train_dbs``: that many more training databases (domains in turn, db indices after the test
    databases') whose table and column names are random adjective_noun pairs (``instance.SCRAMBLED``), the questions
    naming them alike: a policy trained on them must copy names from the schema, not recall them. The test databases
    and questions are the same with or without them (their ids follow the train ids).
    """
    for name, value in (
        ("n_train_dbs", n_train_dbs),
        ("n_test_dbs", n_test_dbs),
        ("questions_per_db", questions_per_db),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(scrambled_train_dbs, int) or isinstance(scrambled_train_dbs, bool) or scrambled_train_dbs < 0:
        raise ValueError(f"scrambled_train_dbs must be a non-negative int, got {scrambled_train_dbs!r}")
    if not isinstance(rl_questions_per_db, int) or isinstance(rl_questions_per_db, bool) or rl_questions_per_db < 0:
        raise ValueError(f"rl_questions_per_db must be a non-negative int, got {rl_questions_per_db!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n_dom = len(DOMAINS)
    train_specs = [(f"{DOMAINS[k % n_dom].name}_{k}", k % n_dom, 0) for k in range(n_train_dbs)]
    test_naming = 1 if rename_test_schemas else 0
    test_specs = [(f"{DOMAINS[k % n_dom].name}_{n_train_dbs + k}", k % n_dom, test_naming) for k in range(n_test_dbs)]
    first = n_train_dbs + n_test_dbs
    train_specs += [
        (f"{DOMAINS[k % n_dom].name}_{first + k}", k % n_dom, SCRAMBLED) for k in range(scrambled_train_dbs)
    ]
    drawn = generate_split_questions(root, train_specs, seed, questions_per_db, extra_per_db=rl_questions_per_db)
    train = drawn.questions
    test = generate_split(root, test_specs, seed, questions_per_db, start_id=len(train))
    _write_json(root / "train.json", train)
    _write_json(root / "test.json", test)
    db_root = str(root / "database")
    rl = None
    if rl_questions_per_db:
        rl_questions = _renumbered(drawn.extra, len(train) + len(test))
        _write_json(root / "rl.json", rl_questions)
        rl = Benchmark("builtin:rl", tuple(q.example for q in rl_questions), db_root)
    else:
        (root / "rl.json").unlink(missing_ok=True)
    return BuiltinSplits(
        Benchmark("builtin:train", tuple(q.example for q in train), db_root),
        Benchmark("builtin:test", tuple(q.example for q in test), db_root),
        rl,
    )


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
    for small models trained from scratch. ``make_builtin_splits`` also makes RL questions.
    """
    splits = make_builtin_splits(
        root,
        seed=seed,
        n_train_dbs=n_train_dbs,
        n_test_dbs=n_test_dbs,
        questions_per_db=questions_per_db,
        rename_test_schemas=rename_test_schemas,
    )
    return splits.train, splits.test


def builtin_kinds(root: str | Path, split: str = "train") -> dict[int, str]:
    """{question_id: template kind} read back from a generated split's JSON file."""
    records = json.loads((Path(root) / f"{split}.json").read_text(encoding="utf-8"))
    return {r["question_id"]: r["kind"] for r in records}
