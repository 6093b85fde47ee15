"""Built-in benchmark: determinism, verified gold SQL, template coverage, held-out test databases."""

import hashlib
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from rewardsql_jax.data import load_bird, make_builtin_benchmark
from rewardsql_jax.data.builtin import BUILTIN_KINDS, builtin_kinds


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("builtin_default")
    train, test = make_builtin_benchmark(root)
    return root, train, test


def test_same_seed_same_bytes_other_seed_other_data(tmp_path):
    kw = dict(n_train_dbs=2, n_test_dbs=1, questions_per_db=10)
    a = make_builtin_benchmark(tmp_path / "a", seed=3, **kw)
    b = make_builtin_benchmark(tmp_path / "b", seed=3, **kw)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")

    def key(split):
        return [(e.question_id, e.db_id, e.question, e.gold_sql, e.difficulty) for e in split]

    assert key(a[0]) == key(b[0]) and key(a[1]) == key(b[1])
    make_builtin_benchmark(tmp_path / "c", seed=4, **kw)
    da, dc = _digest(tmp_path / "a"), _digest(tmp_path / "c")
    assert da.keys() == dc.keys()
    assert all(da[k] != dc[k] for k in da if k.endswith(".sqlite"))


def test_every_gold_sql_executes_non_empty(default_run):
    _, train, test = default_run
    for e in train.examples + test.examples:
        conn = sqlite3.connect(f"file:{e.db_path}?mode=ro", uri=True)
        rows = conn.execute(e.gold_sql).fetchall()
        conn.close()
        assert rows, e.gold_sql


def test_sizes_ids_and_difficulties(default_run):
    root, train, test = default_run
    assert len(train.db_ids) == 12 and len(test.db_ids) == 6
    assert len(train) > 0.9 * 12 * 40 and len(test) > 0.9 * 6 * 40
    ids = [e.question_id for e in train.examples + test.examples]
    assert ids == list(range(len(ids)))
    for split in (train, test):
        assert set(split.difficulty_counts()) == {"simple", "moderate", "challenging"}
        assert len({(e.db_id, e.gold_sql) for e in split}) == len(split)  # no duplicate question per db


def test_every_template_kind_in_both_splits(default_run):
    root, train, test = default_run
    for split in ("train", "test"):
        counts = Counter(builtin_kinds(root, split).values())
        assert set(counts) == set(BUILTIN_KINDS), set(BUILTIN_KINDS) - set(counts)
    kinds = builtin_kinds(root, "train")
    sqls = {kinds[e.question_id]: e.gold_sql for e in train}
    assert " JOIN " in sqls["join"] and sqls["join2"].count(" JOIN ") == 2
    assert " HAVING " in sqls["having"] and " IN (SELECT" in sqls["nested_in"]
    assert " LIKE " in sqls["filter_like"] and " BETWEEN " in sqls["filter_between"]
    assert " UNION " in sqls["union"] and " INTERSECT " in sqls["intersect"] and " EXCEPT " in sqls["except"]
    assert " LIMIT " in sqls["order_limit"] and sqls["distinct"].startswith("SELECT DISTINCT")


def _tables(db_path: str) -> set[str]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    return names


def test_test_databases_are_held_out(default_run):
    root, train, test = default_run
    assert not set(train.db_ids) & set(test.db_ids)
    train_tables = set().union(*(_tables(e.db_path) for e in {e.db_id: e for e in train}.values()))
    test_tables = set().union(*(_tables(e.db_path) for e in {e.db_id: e for e in test}.values()))
    assert train_tables and test_tables and not train_tables & test_tables


def test_json_files_reload_through_the_bird_loader(default_run):
    root, train, test = default_run
    again = load_bird(root, questions="test.json", db_dir="database")
    assert again.examples == test.examples and again.n_skipped == 0


def test_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError, match="n_train_dbs"):
        make_builtin_benchmark(tmp_path, n_train_dbs=0)
