"""Pure helpers of the prm_labels stage: step layout of sampled responses, rule filtering, similarity dedup."""

from __future__ import annotations

import pytest

from rewardsql_jax.models.prm_head import format_prm_input
from rewardsql_jax.stages.prm_labels import filter_rollouts, merge_near_duplicates, raw_steps, response_steps


def test_parseable_cocte_gets_one_step_per_cte_and_the_final_query():
    text = "WITH a AS (SELECT x FROM t), b AS (SELECT * FROM a WHERE x > 1) SELECT COUNT(*) FROM b"
    steps, ok = response_steps(text)
    assert ok and steps == (
        "WITH a AS (SELECT x FROM t),",
        "b AS (SELECT * FROM a WHERE x > 1)",
        "SELECT COUNT(*) FROM b",
    )
    # already in the policy's layout: unchanged
    laid_out = "WITH a AS (\n  SELECT x FROM t\n),\n\nb AS (SELECT * FROM a)\n\nSELECT * FROM b"
    assert "\n\n".join(response_steps(laid_out)[0]) == laid_out
    # the PRM input then carries exactly one tag per step
    assert format_prm_input("Q: ", "\n\n".join(steps)).count(" и") == 3


def test_unparseable_and_plain_responses_keep_their_blocks():
    assert response_steps("garbage (\n\n\n\nmore  ") == (("garbage (", "more"), False)
    assert response_steps("SELECT 1") == (("SELECT 1",), True)
    assert response_steps("  \n\n ") == ((), False)
    assert raw_steps("a\n\n\n\nb\n\n") == ("a", "b")
    # a blank line inside a CTE body cannot be a step boundary in the canonical layout: keep the blocks
    text = "WITH a AS (SELECT x\n\nFROM t) SELECT * FROM a"
    assert response_steps(text) == (("WITH a AS (SELECT x", "FROM t) SELECT * FROM a"), True)


def test_rule_filter_drops_empty_and_duplicates():
    texts = ["SELECT 1", "", "SELECT 1", "  SELECT 1\n", "junk (", "WITH a AS (SELECT 1) SELECT * FROM a"]
    f = filter_rollouts(texts, "search")
    assert f.rollouts == (("SELECT 1",), ("junk (",), ("WITH a AS (SELECT 1)", "SELECT * FROM a"))
    assert (f.empty, f.duplicates, f.unparseable) == (1, 2, 1)
    assert f.parseable[("junk (",)] is False
    dropped = filter_rollouts(texts, "drop")
    assert ("junk (",) not in dropped.rollouts and dropped.unparseable == 1
    with pytest.raises(ValueError, match="unparseable"):
        filter_rollouts(texts, "ignore")


def test_similarity_dedup_merges_formatting_variants_and_keeps_a_share():
    texts = [
        "SELECT a FROM t WHERE b = 1",
        "select a\nfrom t where b = 1",
        "SELECT a FROM t WHERE b = 2",
        "junk (",
        "SELECT COUNT(*) FROM u GROUP BY c",
        "SELECT a, b, c FROM t JOIN u ON t.x = u.y",
    ]
    parse = [True, True, True, False, True, True]
    assert merge_near_duplicates(texts, parse) == [0, 2, 3, 4, 5]  # 1 only differs by formatting
    kept = merge_near_duplicates(texts, parse, keep=0.5)
    assert 3 in kept and 1 not in kept  # unparseable ones are never dropped
    assert len([i for i in kept if parse[i]]) == 2  # half of the 4 distinct parseable ones


def test_mc_completions_continue_the_prefix_and_keep_its_steps():
    from rewardsql_jax.stages.prm_labels import continued_steps

    prefix = ("WITH a AS (SELECT x FROM t)",)
    # the policy writes the blank line itself, then the next steps
    assert continued_steps(prefix, "\n\nSELECT MAX(x) FROM a") == prefix + ("SELECT MAX(x) FROM a",)
    assert continued_steps(prefix, "\n\nb AS (SELECT 1)\n\nSELECT 2") == prefix + ("b AS (SELECT 1)", "SELECT 2")
    # it extends the last step instead: the extension is a step after the prefix
    assert continued_steps(prefix, " WHERE x > 1\n\nSELECT 1") == prefix + ("WHERE x > 1", "SELECT 1")
    assert continued_steps(prefix, "") == prefix
