"""Fitting a schema prompt into a token budget (``data.max_prompt_tokens``), with what was cut said explicitly.

Spider's larger databases (``cre_Drama_Workshop_Groups``, ``sakila_1``: 2,000-3,000 SmolLM2 tokens with three example
values per column) do not fit a small model's context. The schema shrinks in this order until the whole prompt fits:
fewer example values per column (the configured number, then 1, then none); then whole tables left out from the
end of the schema (creation order) with the foreign keys that name them. Nothing reads the gold SQL, so an
evaluation prompt is cut the same way as a training one. When even a one-table schema does not fit, that prompt is
kept as it is and marked ``fits=False``: a question is never dropped here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rewardsql_jax.data.schema import DbSchema, MSchemaOptions, render_m_schema


@dataclass(frozen=True)
class FittedPrompt:
    """The prompt, its length in tokens, the example values per column it shows, the tables it leaves out (schema
    order) and whether it fits the budget."""

    prompt: str
    tokens: int
    example_num: int
    tables_cut: tuple[str, ...]
    fits: bool


def first_tables(schema: DbSchema, k: int) -> DbSchema:
    """``schema`` with its first ``k`` tables and the foreign keys between them."""
    kept = schema.tables[:k]
    names = {t.name.lower() for t in kept}
    fks = tuple(fk for fk in schema.foreign_keys if fk.table.lower() in names and fk.ref_table.lower() in names)
    return DbSchema(tables=kept, foreign_keys=fks)


def example_levels(example_num: int) -> tuple[int, ...]:
    """Example values per column to try, most first: the configured number, then 1, then 0."""
    return tuple(dict.fromkeys(n for n in (example_num, 1, 0) if n <= example_num))


def fit_prompt(
    db_id: str,
    schema: DbSchema,
    build: Callable[[str], str],
    count: Callable[[str], int],
    budget: int,
    options: MSchemaOptions | None = None,
) -> FittedPrompt:
    """The prompt ``build(m_schema_text)`` of at most ``budget`` tokens (``count``) in the order of the module
    docstring: full schema with ``options.example_num`` examples, fewer examples, then the first k tables (the
    largest k that fits, found by bisection); ``options``: the rendering (default: XiYan's)."""
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    options = options or MSchemaOptions()

    def attempt(s: DbSchema, n: int) -> FittedPrompt:
        prompt = build(render_m_schema(db_id, s, options=replace(options, example_num=n)))
        tokens = count(prompt)
        cut = tuple(t.name for t in schema.tables[len(s.tables) :])
        return FittedPrompt(prompt, tokens, n, cut, tokens <= budget)

    for n in example_levels(options.example_num):
        best = attempt(schema, n)
        if best.fits:
            return best
    lo, hi = 1, len(schema.tables) - 1  # the largest k in [lo, hi] whose first k tables fit
    smallest = attempt(first_tables(schema, 1), 0) if schema.tables else best
    if not smallest.fits:
        return replace(best, fits=False)
    best = smallest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        tried = attempt(first_tables(schema, mid), 0)
        if tried.fits:
            lo, best = mid, tried
        else:
            hi = mid - 1
    return best
