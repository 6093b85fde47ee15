"""BIRD loader on the real BIRD dev files in ../shared/data (they ship without SQLite databases),
plus a small hand-made BIRD layout with a database present."""

import json
import sqlite3
from pathlib import Path

import pytest

from rewardsql_jax.data import MissingDatabaseError, load_bird, read_bird_descriptions

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
BIRD_DEV = DATA / "bird" / "dev"
real = pytest.mark.skipif(not BIRD_DEV.is_dir(), reason=f"real BIRD dev data not found at {BIRD_DEV}")
BIRD_DBS = (
    "california_schools",
    "card_games",
    "codebase_community",
    "debit_card_specializing",
    "european_football_2",
    "financial",
    "formula_1",
    "student_club",
    "superhero",
    "thrombosis_prediction",
    "toxicology",
)


@real
def test_dev_questions_and_difficulty_counts():
    b = load_bird(BIRD_DEV, require_db=False)
    assert len(b) == 1534
    assert b.difficulty_counts() == {"simple": 925, "moderate": 464, "challenging": 145}
    assert b.missing_dbs == BIRD_DBS  # no BIRD .sqlite could be obtained (data README)
    first = b.examples[0]
    assert first.question_id == 0 and first.db_id == "california_schools"
    assert first.evidence == "Eligible free rate for K-12 = `Free Meal Count (K-12)` / `Enrollment (K-12)`"
    assert first.gold_sql.startswith("SELECT `Free Meal Count (K-12)` / `Enrollment (K-12)` FROM frpm")
    assert first.db_path.endswith("dev_databases/california_schools/california_schools.sqlite")


@real
def test_dev_missing_databases_are_reported():
    b = load_bird(BIRD_DEV)
    assert len(b) == 0 and b.n_skipped == 1534 and b.missing_dbs == BIRD_DBS
    assert "missing databases (11)" in b.summary() and "1534 questions skipped" in b.summary()
    with pytest.raises(
        MissingDatabaseError,
        match=r"'california_schools' is missing: expected .*"
        r"dev_databases/california_schools/california_schools\.sqlite",
    ):
        load_bird(BIRD_DEV, on_missing="raise")
    tox = load_bird(BIRD_DEV, require_db=False, db_ids=["toxicology"])
    assert len(tox) == 145 and tox.db_ids == ("toxicology",)  # per-DB count from the data README


@real
def test_descriptions_from_csvs_including_cp1252_files():
    tox = read_bird_descriptions(BIRD_DEV / "dev_databases" / "toxicology")
    assert tox[("atom", "atom_id")] == "the unique id of atoms"
    assert tox[("molecule", "label")] == "whether this molecule is carcinogenic or not"
    assert len(tox) == 11
    with_values = read_bird_descriptions(BIRD_DEV / "dev_databases" / "toxicology", with_values=True)
    assert with_values[("atom", "molecule_id")] == (
        "identifying the molecule to which the atom belongs; "
        "commonsense evidence: TRXXX_i represents ith atom of molecule TRXXX"
    )
    football = read_bird_descriptions(BIRD_DEV / "dev_databases" / "european_football_2")
    assert len(football) > 50 and all(isinstance(v, str) and v for v in football.values())
    assert read_bird_descriptions(BIRD_DEV / "dev_databases" / "no_such_db") == {}


def test_small_bird_layout_with_database(tmp_path):
    db_dir = tmp_path / "train_databases" / "shop"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "shop.sqlite")
    conn.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, price REAL)")
    conn.commit()
    conn.close()
    rows = [
        {
            "db_id": "shop",
            "question": "Cheapest item?",
            "evidence": "cheapest refers to MIN(price)",
            "SQL": "SELECT id FROM item ORDER BY price LIMIT 1",
        },
        {"db_id": "gone", "question": "Q?", "evidence": "", "SQL": "SELECT 1"},
    ]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    b = load_bird(tmp_path, split="train")
    assert len(b) == 1 and b.missing_dbs == ("gone",) and b.n_skipped == 1
    e = b.examples[0]
    assert (e.question_id, e.difficulty, e.evidence) == (0, "unknown", "cheapest refers to MIN(price)")
    assert Path(e.db_path) == db_dir / "shop.sqlite"
    with pytest.raises(FileNotFoundError, match="BIRD question file not found.*dev.json"):
        load_bird(tmp_path)


@real
def test_mini_dev_file_against_dev_database_folder():
    mini = DATA / "bird" / "mini_dev"
    b = load_bird(mini, questions="mini_dev_sqlite.json", db_dir=BIRD_DEV / "dev_databases", require_db=False)
    assert len(b) == 500
    assert b.difficulty_counts() == {"simple": 148, "moderate": 250, "challenging": 102}  # data README
    dev_ids = {e.question_id for e in load_bird(BIRD_DEV, require_db=False)}
    assert {e.question_id for e in b} <= dev_ids
