"""data.prompt_fit: a schema prompt fitted into a token budget by fewer example values, then whole tables left out
from the end; a prompt that cannot fit is kept and marked."""

import pytest

from rewardsql_jax.data import MSchemaOptions, m_schema, read_db_schema, reward_sql_prompt
from rewardsql_jax.data.prompt_fit import example_levels, first_tables, fit_prompt

from tiny_db import make_tiny_db


def _fit(path, budget, example_num=3):
    schema = read_db_schema(path)
    build = lambda text: reward_sql_prompt(text, "How many players?")  # noqa: E731
    return fit_prompt("tiny_league", schema, build, len, budget, MSchemaOptions(example_num=example_num)), build


def test_a_prompt_that_fits_is_the_full_schema_prompt(tmp_path):
    path = make_tiny_db(tmp_path)
    fit, build = _fit(path, 10_000)
    assert fit.prompt == build(m_schema(path, db_id="tiny_league"))
    assert (fit.tokens, fit.example_num, fit.tables_cut, fit.fits) == (len(fit.prompt), 3, (), True)


def test_fewer_example_values_first_then_tables_from_the_end(tmp_path):
    path = make_tiny_db(tmp_path)
    full, build = _fit(path, 10_000)
    no_examples = build(m_schema(path, db_id="tiny_league", options=MSchemaOptions(example_num=0)))
    one_example = build(m_schema(path, db_id="tiny_league", options=MSchemaOptions(example_num=1)))
    assert len(no_examples) < len(one_example) < full.tokens

    fit, _ = _fit(path, len(one_example))
    assert (fit.prompt, fit.example_num, fit.tables_cut) == (one_example, 1, ())

    fit, _ = _fit(path, len(no_examples))
    assert (fit.prompt, fit.example_num, fit.tables_cut, fit.fits) == (no_examples, 0, (), True)

    fit, _ = _fit(path, len(no_examples) - 1)  # only the first table (team) fits; the foreign key goes with player
    assert fit.fits and fit.tables_cut == ("player",) and fit.tokens <= len(no_examples) - 1
    assert (
        "# Table: team" in fit.prompt and "# Table: player" not in fit.prompt and "【Foreign keys】" not in fit.prompt
    )
    assert "How many players?" in fit.prompt


def test_a_prompt_that_cannot_fit_is_kept_and_marked(tmp_path):
    path = make_tiny_db(tmp_path)
    fit, build = _fit(path, 50)
    assert not fit.fits and fit.tables_cut == () and fit.example_num == 0
    assert fit.prompt == build(m_schema(path, db_id="tiny_league", options=MSchemaOptions(example_num=0)))
    with pytest.raises(ValueError, match="budget must be a positive"):
        _fit(path, 0)


def test_first_tables_and_example_levels(tmp_path):
    schema = read_db_schema(make_tiny_db(tmp_path))
    assert [t.name for t in first_tables(schema, 1).tables] == ["team"] and not first_tables(schema, 1).foreign_keys
    assert first_tables(schema, 2) == schema
    assert example_levels(3) == (3, 1, 0) and example_levels(1) == (1, 0) and example_levels(0) == (0,)
