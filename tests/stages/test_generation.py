"""``generate_sql``: chunked generation decoded to text; ``stop_token_ids`` end a row after the first of them, and
stay in its text (unlike EOS)."""

import numpy as np
from tiny_shapes import tiny_model

from rewardsql_jax.data.builtin import train_bpe_tokenizer
from rewardsql_jax.models import fresh_model
from rewardsql_jax.stages.generation import generate_sql


def test_a_stop_token_ends_the_row_after_its_first_occurrence(tmp_path):
    tok = train_bpe_tokenizer(["SELECT name FROM singer WHERE age > 30", "How many singers?"] * 20, 300, tmp_path)
    model = fresh_model(tiny_model(max_len=256), len(tok), tok.eos_token_id, 0)
    prompts = ["How many singers?", "SELECT name FROM"]
    free = generate_sql(model, tok, prompts, max_new_tokens=12, progress=False)
    first = free.token_ids[0][0]
    stop = next(t for t in first[2:] if t != tok.eos_token_id)  # a token the first prompt produces at step >= 2
    cut = first.index(stop) + 1
    got = generate_sql(model, tok, prompts, max_new_tokens=12, progress=False, stop_token_ids=(stop,))
    assert got.token_ids[0][0] == first[:cut]
    assert got.texts[0][0] == tok.decode(first[:cut], skip_special_tokens=True).strip()
    other = free.token_ids[1][0]
    want = other[: other.index(stop) + 1] if stop in other else other
    assert got.token_ids[1][0] == want
    np.testing.assert_allclose(got.logprobs[0][0], free.logprobs[0][0][:cut], atol=1e-6)
