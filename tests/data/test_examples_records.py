"""Example / Benchmark records: validation and summaries."""

import pytest

from rewardsql_jax.data import Benchmark, Example


def _ex(i, db="db1", diff="easy"):
    return Example(
        question_id=i,
        db_id=db,
        question="q?",
        evidence="",
        gold_sql="SELECT 1",
        difficulty=diff,
        db_path=f"/x/{db}/{db}.sqlite",
    )


def test_example_rejects_empty_fields_and_bad_types():
    with pytest.raises(ValueError, match="gold_sql"):
        Example(question_id=0, db_id="d", question="q", evidence="", gold_sql=" ", difficulty="easy", db_path="p")
    with pytest.raises(TypeError, match="question_id"):
        Example(question_id="0", db_id="d", question="q", evidence="", gold_sql="S", difficulty="easy", db_path="p")
    with pytest.raises(TypeError, match="evidence"):
        Example(question_id=0, db_id="d", question="q", evidence=None, gold_sql="S", difficulty="easy", db_path="p")


def test_example_is_frozen():
    e = _ex(0)
    with pytest.raises(AttributeError):
        e.question = "other"


def test_benchmark_counts_and_summary():
    b = Benchmark(
        "toy", (_ex(0), _ex(1, "db2", "hard"), _ex(2, "db1", "hard")), "/x", missing_dbs=("db9",), n_skipped=4
    )
    assert len(b) == 3
    assert b.db_ids == ("db1", "db2")
    assert b.difficulty_counts() == {"easy": 1, "hard": 2}
    s = b.summary()
    assert "3 questions on 2 databases" in s and "db9" in s and "4 questions skipped" in s
    with pytest.raises(TypeError):
        Benchmark("toy", [_ex(0)], "/x")
