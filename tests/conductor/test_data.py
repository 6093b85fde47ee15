import random

from rewardsql_jax.conductor.data import add_value_typos, misspell
from rewardsql_jax.data.examples import Example


def _ex(qid, q, sql):
    return Example(question_id=qid, db_id="d", question=q, evidence="", gold_sql=sql, difficulty="simple", db_path="x")


def test_misspell_changes_word():
    rng = random.Random(0)
    for w in ("Brazil", "Paris", "North Wing", "Lisbon"):
        out = misspell(w, rng)
        assert out.lower() != w.lower() and abs(len(out) - len(w)) <= 1


def test_typos_touch_only_quoted_values_and_keep_gold():
    exs = [_ex(0, "List singers whose country is Brazil.", "SELECT name FROM singer WHERE country = 'Brazil'"),
           _ex(1, "How many singers?", "SELECT COUNT(*) FROM singer"),
           _ex(2, "Names starting with 'Ab'?", "SELECT name FROM t WHERE name LIKE 'Ab%'")]
    out = add_value_typos(exs, rate=1.0, seed=3)
    assert "Brazil" not in out[0].question and out[0].gold_sql == exs[0].gold_sql
    assert out[1] == exs[1] and out[2] == exs[2]
    assert add_value_typos(exs, rate=0.0) == tuple(exs)
    assert add_value_typos(exs, rate=1.0, seed=3) == out  # seeded


def test_heldout_split_per_database():
    from rewardsql_jax.conductor.data import heldout_split
    exs = [_ex(i, f"q{i}", "SELECT 1") for i in range(10)]
    exs = [e if e.question_id < 6 else Example(question_id=e.question_id, db_id="e", question=e.question, evidence="",
                                               gold_sql=e.gold_sql, difficulty="simple", db_path="y") for e in exs]
    train, held = heldout_split(exs, 3)
    assert [e.question_id for e in held] == [2, 5, 8]  # every 3rd question of each database
    assert len(train) + len(held) == 10 and not {e.question_id for e in train} & {e.question_id for e in held}
