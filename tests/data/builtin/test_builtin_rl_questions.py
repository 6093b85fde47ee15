"""RL questions of the built-in benchmark: more questions on the train databases, none with an SFT gold SQL,
deterministic in the seed, split at random from one pool with the train questions (one template mix), test.json untouched."""

import json
import sqlite3
from collections import Counter

import pytest

from rewardsql_jax.data import load_bird, make_builtin_benchmark
from rewardsql_jax.data.builtin.generate import make_builtin_splits

KW = dict(n_train_dbs=2, n_test_dbs=1, questions_per_db=20)


def key(split):  # db_path differs with the root
    return [(e.question_id, e.db_id, e.question, e.gold_sql, e.difficulty) for e in split]


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("builtin_rl")
    return root, make_builtin_splits(root, seed=5, rl_questions_per_db=30, **KW)


def test_train_and_rl_questions_split_one_pool_and_test_is_unchanged(tmp_path, rl_run):
    root, splits = rl_run
    make_builtin_benchmark(tmp_path / "plain", seed=5, **KW)
    assert (root / "test.json").read_bytes() == (tmp_path / "plain" / "test.json").read_bytes()
    pool_train, _ = make_builtin_benchmark(tmp_path, seed=5, **{**KW, "questions_per_db": 50})
    pool = Counter((e.db_id, e.gold_sql) for e in pool_train)  # the same 50 questions per database
    assert Counter((e.db_id, e.gold_sql) for e in splits.train.examples + splits.rl.examples) == pool
    assert Counter(e.db_id for e in splits.train) == {db: 20 for db in splits.train.db_ids}
    assert not (tmp_path / "rl.json").exists()


def test_rl_questions_are_new_distinct_verified_and_on_train_databases(rl_run):
    root, splits = rl_run
    rl, train, test = splits.rl, splits.train, splits.test
    assert Counter(e.db_id for e in rl) == {db: 30 for db in train.db_ids}
    train_sql = {(e.db_id, e.gold_sql) for e in train}
    rl_sql = [(e.db_id, e.gold_sql) for e in rl]
    assert not set(rl_sql) & train_sql
    assert len(set(rl_sql)) == len(rl_sql)
    ids = [e.question_id for e in train.examples + test.examples + rl.examples]
    assert ids == list(range(len(ids)))  # RL ids follow the test ids
    for e in rl:
        conn = sqlite3.connect(f"file:{e.db_path}?mode=ro", uri=True)
        rows = conn.execute(e.gold_sql).fetchall()
        conn.close()
        assert rows and not all(v is None for r in rows for v in r), e.gold_sql
    again = load_bird(root, questions="rl.json", db_dir="database")
    assert again.examples == rl.examples
    assert {r["kind"] for r in json.loads((root / "rl.json").read_text())} > {"filter_between"}


def test_rl_questions_are_deterministic_in_the_seed(tmp_path, rl_run):
    root, splits = rl_run
    same = make_builtin_splits(tmp_path / "same", seed=5, rl_questions_per_db=30, **KW)
    assert (tmp_path / "same" / "rl.json").read_bytes() == (root / "rl.json").read_bytes()
    assert key(same.rl) == key(splits.rl)
    other = make_builtin_splits(tmp_path / "other", seed=6, rl_questions_per_db=30, **KW)
    assert [e.gold_sql for e in other.rl] != [e.gold_sql for e in splits.rl]


def test_a_saturated_template_space_gives_fewer_and_stops(tmp_path):
    kw = dict(n_train_dbs=1, n_test_dbs=1, questions_per_db=5)
    splits = make_builtin_splits(tmp_path, seed=0, rl_questions_per_db=2_000, **kw)
    n = len(splits.rl)
    assert 100 < n < 2_000  # what exists, not what was asked
    assert len({e.gold_sql for e in splits.rl} | {e.gold_sql for e in splits.train}) == n + len(splits.train)


def test_zero_removes_a_stale_rl_file_and_rejects_negative(tmp_path):
    make_builtin_splits(tmp_path, seed=0, rl_questions_per_db=3, **KW)
    assert (tmp_path / "rl.json").exists()
    assert make_builtin_splits(tmp_path, seed=0, **KW).rl is None
    assert not (tmp_path / "rl.json").exists()
    with pytest.raises(ValueError, match="rl_questions_per_db"):
        make_builtin_splits(tmp_path, rl_questions_per_db=-1)
