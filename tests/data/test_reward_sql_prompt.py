"""Reward-SQL prompt: exact string for a hand-made DB; plain prompt."""

import pytest

from rewardsql_jax.data import m_schema, plain_prompt, reward_sql_prompt

from tiny_db import TINY_DESCRIPTIONS, TINY_GOLDEN, make_tiny_db

GOLDEN = (
    "You are now a sqlite data analyst, and you are given a database schema as follows:\n\n【Schema】\n"
    + TINY_GOLDEN
    + "\n\n【Question】\nHow many players does the Lions team have? Lions refers to name = 'Lions'\n\n"
    "【Evidence】\nLions refers to name = 'Lions'\n\n"
    "Please read and understand the database schema carefully, and generate an executable SQL based on the "
    "user's question and evidence.\n"
)


def test_reward_sql_prompt_golden(tmp_path):
    schema = m_schema(make_tiny_db(tmp_path), descriptions=TINY_DESCRIPTIONS)
    prompt = reward_sql_prompt(schema, "How many players does the Lions team have?", "Lions refers to name = 'Lions'")
    assert prompt == GOLDEN


def test_no_evidence_leaves_no_trailing_space():
    prompt = reward_sql_prompt("【DB_ID】 d", "How many?", "")
    assert "【Question】\nHow many?\n\n【Evidence】\n\n\nPlease" in prompt


def test_plain_prompt_and_validation():
    assert plain_prompt("t(a)", "Q?", "") == "Database schema:\nt(a)\n\nQuestion: Q?\n\nSQL:\n"
    assert plain_prompt("t(a)", "Q?", "E") == "Database schema:\nt(a)\n\nQuestion: Q?\nEvidence: E\n\nSQL:\n"
    with pytest.raises(ValueError, match="schema_text"):
        reward_sql_prompt("", "Q?", "")
    with pytest.raises(TypeError, match="evidence"):
        reward_sql_prompt("s", "Q?", None)
