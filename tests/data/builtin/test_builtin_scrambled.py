"""Scrambled training databases (``scrambled_train_dbs``): random identifiers, the questions naming them, every gold
SQL verified, and the test split untouched."""

import re
import sqlite3

import pytest

from rewardsql_jax.data.builtin.domains import DOMAINS
from rewardsql_jax.data.builtin.generate import make_builtin_splits
from rewardsql_jax.data.builtin.instance import SCRAMBLED, spelling

KW = dict(seed=5, n_train_dbs=2, n_test_dbs=2, questions_per_db=12)


def _own_names(naming: int) -> set:
    return {n for d in DOMAINS for t in d.tables for n in (t.names[naming], *(c.names[naming] for c in t.cols))}


def _identifiers(db_path: str) -> set:
    conn = sqlite3.connect(db_path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return set(tables) | {c[1] for t in tables for c in conn.execute(f"PRAGMA table_info({t})")}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("scrambled")
    return (
        root,
        make_builtin_splits(root / "with", scrambled_train_dbs=2, **KW),
        make_builtin_splits(root / "without", **KW),
    )


def test_scrambled_databases_use_none_of_the_domains_names(splits):
    _, with_, _ = splits
    scrambled = {e.db_id for e in with_.train.examples} - {f"{DOMAINS[k].name}_{k}" for k in range(2)}
    assert scrambled == {f"{DOMAINS[0].name}_4", f"{DOMAINS[1].name}_5"}
    known = _own_names(0) | _own_names(1)
    for db_id in scrambled:
        names = _identifiers(f"{with_.train.db_root}/{db_id}/{db_id}.sqlite")
        ids = {n for n in names if n.endswith("_id")}
        assert names - ids and not (names - ids) & known, db_id
        assert all(re.fullmatch(r"[a-z]+_[a-z]+", n) for n in names - ids), names


def test_scrambled_questions_name_their_tables_and_their_gold_sql_runs(splits):
    _, with_, _ = splits
    examples = [e for e in with_.train.examples if e.db_id.endswith(("_4", "_5"))]
    assert len(examples) == 2 * KW["questions_per_db"]
    for e in examples:
        conn = sqlite3.connect(f"{with_.train.db_root}/{e.db_id}/{e.db_id}.sqlite")
        try:
            assert conn.execute(e.gold_sql).fetchall(), e.gold_sql
        finally:
            conn.close()
    # the questions use the scrambled nouns ("golden rivers"), as held-out questions use their schema's nouns
    tables = {w.replace("_", " ") for e in examples for w in re.findall(r"\b([a-z]+_[a-z]+)s?\b", e.gold_sql)}
    assert sum(any(t in e.question.lower() for t in tables) for e in examples) >= len(examples) // 2


def test_the_test_split_and_the_first_train_databases_do_not_change(splits):
    root, with_, without = splits

    def content(examples):
        return [(e.db_id, e.question, e.gold_sql, e.difficulty) for e in examples]

    assert content(with_.test.examples) == content(without.test.examples)
    assert content(with_.train.examples[: len(without.train.examples)]) == content(without.train.examples)
    for e in without.test.examples:  # the same database files
        db = f"{e.db_id}/{e.db_id}.sqlite"
        assert (root / "with" / "database" / db).read_bytes() == (root / "without" / "database" / db).read_bytes()


def test_a_scrambled_spelling_is_seeded_by_the_database_and_distinct():
    a, b = spelling(DOMAINS[0], SCRAMBLED, "school_7"), spelling(DOMAINS[0], SCRAMBLED, "school_8")
    assert a == spelling(DOMAINS[0], SCRAMBLED, "school_7") and a != b
    names = [t[0] for t in a.tables.values()] + list(a.columns.values())
    assert len(set(names)) == len(names)
    with pytest.raises(ValueError, match="naming must be"):
        spelling(DOMAINS[0], 3, "school_7")


def test_bad_counts_are_refused(tmp_path):
    with pytest.raises(ValueError, match="scrambled_train_dbs"):
        make_builtin_splits(tmp_path, scrambled_train_dbs=-1, **KW)


def test_the_run_config_takes_them_for_the_builtin_data_only():
    from rewardsql_jax.stages.run_config import DataConfig

    assert DataConfig(scrambled_train_dbs=4).scrambled_train_dbs == 4
    with pytest.raises(ValueError, match="scrambled_train_dbs=2 generates databases"):
        DataConfig(source="spider", root="x", scrambled_train_dbs=2)
    with pytest.raises(ValueError, match="non-negative"):
        DataConfig(scrambled_train_dbs=-1)
