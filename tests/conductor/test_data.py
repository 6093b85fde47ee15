import random

import pytest

from rewardsql_jax.conductor.data import add_value_typos, evaluation_split, misspell
from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.data.builtin import make_builtin_benchmark
from rewardsql_jax.data.examples import Example


def _ex(qid, q, sql):
    return Example(question_id=qid, db_id="d", question=q, evidence="", gold_sql=sql, difficulty="simple", db_path="x")


def test_misspell_changes_word():
    rng = random.Random(0)
    for w in ("Brazil", "Paris", "North Wing", "Lisbon"):
        out = misspell(w, rng)
        assert out.lower() != w.lower() and abs(len(out) - len(w)) <= 1


def test_typos_touch_only_quoted_values_and_keep_gold():
    exs = [
        _ex(0, "List singers whose country is Brazil.", "SELECT name FROM singer WHERE country = 'Brazil'"),
        _ex(1, "How many singers?", "SELECT COUNT(*) FROM singer"),
        _ex(2, "Names starting with 'Ab'?", "SELECT name FROM t WHERE name LIKE 'Ab%'"),
    ]
    out = add_value_typos(exs, rate=1.0, seed=3)
    assert "Brazil" not in out[0].question and out[0].gold_sql == exs[0].gold_sql
    assert out[1] == exs[1] and out[2] == exs[2]
    assert add_value_typos(exs, rate=0.0) == tuple(exs)
    assert add_value_typos(exs, rate=1.0, seed=3) == out  # seeded


def test_heldout_split_per_database():
    from rewardsql_jax.conductor.data import heldout_split

    exs = [_ex(i, f"q{i}", "SELECT 1") for i in range(10)]
    exs = [
        e
        if e.question_id < 6
        else Example(
            question_id=e.question_id,
            db_id="e",
            question=e.question,
            evidence="",
            gold_sql=e.gold_sql,
            difficulty="simple",
            db_path="y",
        )
        for e in exs
    ]
    train, held = heldout_split(exs, 3)
    assert [e.question_id for e in held] == [2, 5, 8]  # every 3rd question of each database
    assert len(train) + len(held) == 10 and not {e.question_id for e in train} & {e.question_id for e in held}


def test_evaluation_split_heldout_questions_or_unseen_test_databases(tmp_path):
    train, test = make_builtin_benchmark(tmp_path, seed=0, n_train_dbs=2, n_test_dbs=2, questions_per_db=8)
    opts = dict(heldout_every=4, max_eval_questions=0, value_typo_rate=0.5, seed=0)
    tr, ev = evaluation_split(train.examples, test.examples, eval_on="heldout_questions", **opts)
    assert len(ev) == 4 and len(tr) == 12  # 2 of 8 questions per training database
    assert {e.db_id for e in ev} == {e.db_id for e in tr} == {e.db_id for e in train.examples}
    assert not {e.question_id for e in ev} & {e.question_id for e in tr}
    tr, ev = evaluation_split(train.examples, test.examples, eval_on="test_dbs", **opts)
    assert len(tr) == 16 and len(ev) == 16  # every training question trains; every test question evaluates
    assert {e.db_id for e in ev} == {e.db_id for e in test.examples} and not {e.db_id for e in ev} & {
        e.db_id for e in tr
    }
    _, few = evaluation_split(train.examples, test.examples, eval_on="test_dbs", **{**opts, "max_eval_questions": 6})
    assert len(few) == 6 and {e.db_id for e in few} == {e.db_id for e in test.examples}  # evenly spaced
    with pytest.raises(ValueError, match="data.eval_on='dev'; choose one of heldout_questions, test_dbs"):
        evaluation_split(train.examples, test.examples, eval_on="dev", **opts)


def test_eval_on_override_and_its_error():
    cfg = apply_overrides(load_config("configs/conductor_smoke.py"), ["data.eval_on=test_dbs"])
    assert cfg.data.eval_on == "test_dbs"
    with pytest.raises(ValueError, match="data.eval_on='dev_dbs'; choose one of heldout_questions, test_dbs"):
        apply_overrides(cfg, ["data.eval_on=dev_dbs"])


def test_action_model_questions_train_only_the_action_model(tmp_path):
    """data.action_questions_per_db adds questions for the action model's SFT only: none shares a gold SQL with a
    training or evaluation question, and the policy's questions are the split's."""
    from rewardsql_jax.conductor.context import setup

    base = apply_overrides(load_config("configs/conductor_smoke.py"), [f"run_dir={tmp_path / 'a'}"])
    more = apply_overrides(base, [f"run_dir={tmp_path / 'b'}", "data.action_questions_per_db=6"])
    plain, extra = setup(base, lambda _: None), setup(more, lambda _: None)
    assert len(extra.pairs) > len(plain.pairs)  # 3 tasks a question: 2 databases x 6 more questions
    assert len(extra.train_ex) == len(plain.train_ex) and len(extra.test_ex) == len(plain.test_ex)
    policy_sql = {e.gold_sql for e in extra.train_ex + extra.test_ex}
    action_only = [t for p, t in extra.pairs if p.startswith("task: generate") and t not in policy_sql]
    assert len(action_only) == 12
    assert not any(e.gold_sql in action_only for e in extra.test_ex)
    with pytest.raises(ValueError, match="data.action_questions_per_db must be >= 0"):
        apply_overrides(base, ["data.action_questions_per_db=-1"])
