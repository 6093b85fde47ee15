"""SQL a model wrote, nested deeper than sqlglot's recursive-descent parser can go (a degenerate greedy generation
on Spider dev: ~3,000 open parentheses), is unparseable text to every reader of generated SQL, not a
``RecursionError`` that ends the run."""

import pytest
from sqlglot.errors import ParseError

from rewardsql_jax.sql.clauses import split_sql
from rewardsql_jax.sql.cocte import parse_single
from rewardsql_jax.sql.dedup import preorder_tokens
from rewardsql_jax.sql.extract import extract_sql
from rewardsql_jax.sql.incremental import build_steps
from rewardsql_jax.sql.parse import parse_sql

DEEP = "SELECT " + "(" * 3000 + "1" + ")" * 3000 + " FROM t"


def test_deep_nesting_is_a_parse_error():
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_sql(DEEP)
    assert [t.sql() for t in parse_sql("SELECT (((1))) FROM t")] == ["SELECT (((1))) FROM t"]


def test_readers_of_generated_sql_treat_it_as_unparseable():
    assert extract_sql(f"```sql\n{DEEP}\n```") == DEEP  # read out as written (it then fails as SQL), no crash
    assert extract_sql(f"{DEEP[:40]}\nSELECT a FROM t;") == "SELECT a FROM t"  # the query of the reply that parses
    assert split_sql(DEEP).parsed is False
    for reader in (parse_single, preorder_tokens, build_steps):
        with pytest.raises(ValueError, match="nested too deeply"):
            reader(DEEP)
