"""Rewards of hand-made rollouts: token offsets of sampled ids, step advantages on step tokens, outcome z-scores,
execution outcomes and EXPO-SQL clause rewards on clause tokens (real SQLite, real worker pool)."""

import sqlite3

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rewardsql_jax.rewards.rollout_rewards import (
    DecodedCompletion,
    align_step_scores,
    batch_clause_rewards,
    clause_token_rewards,
    decode_with_offsets,
    execution_outcomes,
    outcome_advantages,
    process_reward,
    process_token_advantages,
    step_token_values,
)
from rewardsql_jax.sql import ExecutorPool
from rewardsql_jax.sql.clause_rewards import RewardOptions

COCTE = (
    "WITH old AS (\n  SELECT name, age FROM singer WHERE age > 30\n),\n\n"
    "names AS (\n  SELECT name FROM old\n)\n\nSELECT COUNT(*) FROM names"
)
SHORT = "WITH t AS (SELECT name FROM singer)\n\nSELECT name FROM t"
GOLD = "SELECT name FROM singer WHERE age > 30"
WRONG_WHERE = "SELECT name FROM singer WHERE age > 60"


@pytest.fixture(scope="module")
def tok():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    t.train_from_iterator([COCTE, SHORT, GOLD, WRONG_WHERE] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "singers.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE singer (name TEXT, age INTEGER);"
        "INSERT INTO singer VALUES ('a', 25), ('b', 35), ('c', 45), ('d', 70);"
    )
    conn.commit()
    conn.close()
    return str(path)


@pytest.fixture(scope="module")
def pool():
    with ExecutorPool(workers=1) as p:
        yield p


def _ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def test_offsets_cover_each_sampled_token_and_eos_takes_the_last_char(tok):
    ids = _ids(tok, COCTE) + [tok.eos_token_id]
    d = decode_with_offsets(tok, ids, [tok.eos_token_id])
    assert d.text == COCTE and d.offsets.shape == (len(ids), 2)
    for t, (s, e) in zip(ids[:-1], d.offsets[:-1]):
        assert d.text[s:e] == tok.decode([t])
    assert tuple(d.offsets[-1]) == (len(COCTE) - 1, len(COCTE))
    assert d.offsets[0][0] == 0 and d.offsets[-2][1] == len(COCTE)


def test_offsets_of_a_non_canonical_tokenisation_and_stripped_whitespace(tok):
    # One token per character is not how the tokenizer would encode the text: offsets still follow the ids.
    text = "  SELECT name"
    ids = [i for ch in text for i in _ids(tok, ch)]
    d = decode_with_offsets(tok, ids, [tok.eos_token_id])
    assert d.text == "SELECT name"
    assert [tuple(o) for o in d.offsets[:3]] == [(0, 0), (0, 0), (0, 1)]  # stripped spaces: empty spans
    assert [d.text[s:e] for s, e in d.offsets[2:]] == list("SELECT name")
    empty = decode_with_offsets(tok, [tok.eos_token_id], [tok.eos_token_id])
    assert empty.text == "" and empty.offsets.tolist() == [[0, 0]]


def test_offsets_when_a_character_is_split_over_byte_tokens(tok):
    text = "SELECT 'Zoë'"  # 'ë' was not in the training text: two byte-level tokens, each decoding to U+FFFD alone
    ids = _ids(tok, text)
    assert len(ids) > len(_ids(tok, "SELECT 'Zoe'"))
    d = decode_with_offsets(tok, ids, [])
    assert d.text == text
    ends = d.offsets[:, 1]
    assert (np.diff(ends) >= 0).all() and ends[-1] == len(text) and (d.offsets[:, 0] <= ends).all()
    covered = np.zeros(len(text), bool)
    for s, e in d.offsets:
        covered[s:e] = True
    assert covered.all()
    assert "".join(text[s:e] for s, e in d.offsets) == text


def _by_hand_paper(scores, outcomes):
    pr = np.array([np.mean(s) for s in scores])
    r = pr + np.asarray(outcomes)
    a = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    return [ai * np.asarray(s) if ai > 0 else ai * (1 - np.asarray(s)) for ai, s in zip(a, scores)]


def test_step_advantages_land_on_the_tokens_of_their_step(tok):
    comps = [decode_with_offsets(tok, _ids(tok, t) + [tok.eos_token_id], [tok.eos_token_id]) for t in (COCTE, SHORT)]
    scores = [[0.9, 0.2, 0.6], [0.5, 0.3]]
    outcomes = [1.0, 0.0]
    values = process_token_advantages(comps, scores, outcomes, 2, variant="paper")
    expected = _by_hand_paper(scores, outcomes)
    for comp, vals, exp in zip(comps, values, expected):
        assert vals.shape == (len(comp.offsets),)
        starts = [0] + [i + 2 for i in range(len(comp.text)) if comp.text.startswith("\n\n", i)]
        bounds = starts + [len(comp.text) + 1]
        checked = set()
        for (s, e), v in zip(comp.offsets, vals):
            step = max(j for j, b in enumerate(starts) if b <= max(s, 0))
            if e <= bounds[step + 1]:  # token inside one step
                assert v == pytest.approx(exp[step], abs=1e-6)
                checked.add(step)
        assert checked == set(range(len(exp)))
        assert vals[-1] == pytest.approx(exp[-1], abs=1e-6)  # EOS ends the last step
    # Positive advantage scales with the step score, negative with (1 - score).
    assert expected[0][0] > expected[0][2] > expected[0][1] > 0 and all(x < 0 for x in expected[1])


def test_released_and_deepseekmath_variants_are_wired(tok):
    comps = [decode_with_offsets(tok, _ids(tok, SHORT), []) for _ in range(2)]
    scores, outcomes = [[0.9, 0.8], [0.1, 0.4]], [1.0, 0.0]
    rel = process_token_advantages(comps, scores, outcomes, 2, variant="released")
    dsm = process_token_advantages(comps, scores, outcomes, 2, variant="deepseekmath")
    first = np.array([s == 0 for s, _ in comps[0].offsets])  # first token of the text: step 0
    # released: A_0 > 0 and r = 1 + s > 1 -> (r - 1) A = s * A
    a = (np.array([1.85, 0.25]) - 1.05) / (np.std([1.85, 0.25], ddof=1) + 1e-6)
    assert rel[0][first][0] == pytest.approx(0.9 * a[0], rel=1e-5)
    flat = np.array([0.9, 0.8, 0.1, 0.4])
    z = (flat - flat.mean()) / (flat.std(ddof=1) + 1e-6)
    assert dsm[1][first][0] == pytest.approx(z[2] + z[3], rel=1e-5)  # return-to-go over steps


def test_outcome_advantages_are_group_z_scores():
    o = np.array([1, 0, 0, 1, 1, 1, 1, 0], np.float32)
    adv = outcome_advantages(o, 4)
    g = o.reshape(2, 4)
    exp = ((g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)
    np.testing.assert_allclose(adv, exp, rtol=1e-6)
    assert adv.shape == (8,)


def test_step_scores_are_aligned_to_blocks():
    c = DecodedCompletion("a\n\nb\n\nc", np.zeros((0, 2), np.int64))
    assert align_step_scores(c, [0.1, 0.2, 0.3, 0.9]).tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert align_step_scores(c, [0.4]).tolist() == pytest.approx([0.4, 0.4, 0.4])
    assert align_step_scores(c, []).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="step values"):
        step_token_values(c, [0.1])
    assert process_reward([0.2, 0.6]) == pytest.approx(0.4) and process_reward([]) == 0.0


def test_execution_outcomes_bird_rule(pool, db):
    preds = ["SELECT name FROM singer WHERE age > 30 ORDER BY name DESC", WRONG_WHERE, "SELEC nonsense", ""]
    out = execution_outcomes(pool, [db] * 4, preds, [GOLD] * 4)
    assert out.rewards.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out.executable.tolist() == [True, True, False, False]
    assert out.gold_ok.all() and len(out.results) == 4


def test_clause_rewards_land_on_clause_tokens(tok, pool, db):
    preds = [WRONG_WHERE, GOLD, "SELEC nonsense"]
    out = execution_outcomes(pool, [db] * 3, preds, [GOLD] * 3)
    cl = batch_clause_rewards(pool, [db] * 3, preds, [GOLD] * 3, out)
    assert [c.case for c in cl] == ["incorrect", "correct", "error"]
    comp = decode_with_offsets(tok, _ids(tok, WRONG_WHERE) + [tok.eos_token_id], [tok.eos_token_id])
    vals = clause_token_rewards(comp, cl[0])
    where = next(c for c in cl[0].clauses if c.kind == "WHERE")
    assert where.reward == -0.5 and where.erroneous
    hits = {"where": 0, "other": 0}
    for (s, e), v in zip(comp.offsets[:-1], vals[:-1]):
        if where.start <= s and e <= where.end and e > s:
            assert v == -0.5
            hits["where"] += 1
        elif any(c.start <= s and e <= c.end for c in cl[0].clauses if c is not where) and e > s:
            assert v == 0.5
            hits["other"] += 1
    assert hits["where"] >= 2 and hits["other"] >= 2
    assert vals[-1] == -0.5  # EOS ends the WHERE clause, the last text
    good = decode_with_offsets(tok, _ids(tok, GOLD), [])
    assert set(clause_token_rewards(good, cl[1]).tolist()) <= {1.5, 0.0} and 1.5 in clause_token_rewards(good, cl[1])


def test_completion_without_clauses_gets_the_error_reward(tok):
    empty = decode_with_offsets(tok, [tok.eos_token_id], [tok.eos_token_id])
    opts = RewardOptions()
    assert clause_token_rewards(empty, None).tolist() == [opts.error_erroneous]
    assert clause_token_rewards(empty, None, gold_ok=False).tolist() == [0.0]


def test_failing_gold_gives_no_clause_rewards(pool, db):
    out = execution_outcomes(pool, [db], [GOLD], ["SELECT missing FROM nowhere"])
    assert out.rewards.tolist() == [0.0] and not out.gold_ok[0]
    assert batch_clause_rewards(pool, [db], [GOLD], ["SELECT missing FROM nowhere"], out) == [None]


def test_execution_outcomes_follow_the_runs_ex_rule(pool, db):
    """data.ex_mode=spider: the training OR is Spider's rule (row order when the gold orders; duplicates count),
    not the BIRD set rule; clause rewards get the matching ``ordered_bag`` rule."""
    from rewardsql_jax.rewards.rollout_rewards import clause_reward_options
    from rewardsql_jax.sql import exec_match

    gold = "SELECT name FROM singer ORDER BY age DESC"
    preds = ["SELECT name FROM singer ORDER BY age ASC", "SELECT name FROM singer ORDER BY age DESC"]
    bird = execution_outcomes(pool, [db, db], preds, [gold, gold], mode="bird")
    spider = execution_outcomes(pool, [db, db], preds, [gold, gold], mode="spider")
    assert bird.rewards.tolist() == [1.0, 1.0]
    assert spider.rewards.tolist() == [float(exec_match(db, p, gold, mode="spider")) for p in preds] == [0.0, 1.0]
    assert clause_reward_options("spider").match == "ordered_bag" and clause_reward_options("bird").match == "bird"
    with pytest.raises(ValueError, match="data.ex_mode"):
        execution_outcomes(pool, [db], preds[:1], [gold], mode="test-suite")


def test_a_missing_database_is_an_error_not_a_zero_reward(pool, db, tmp_path):
    with pytest.raises(FileNotFoundError, match="database file"):
        execution_outcomes(pool, [str(tmp_path / "gone.sqlite")], ["SELECT 1"], ["SELECT 1"])
