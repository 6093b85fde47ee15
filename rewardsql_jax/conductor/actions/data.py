"""Supervised data for the built-in action model (the frozen sub-task LLM of SQLConductor, Sec. 4.1).

The paper uses an off-the-shelf LLM; the built-in default trains a small one from scratch on the train
split, one example per sub-task and question, conditioned like the actions call it:

* generate: schema (full or linked) with or without retrieved values -> gold SQL
* steps:    the same context -> the gold query as a verified Chain-of-CTEs (``sql.to_cocte``)
* refine:   a corrupted query with its real execution feedback -> gold SQL (and an unchanged correct
            query -> itself, so refinement keeps what already works)
"""

from __future__ import annotations

import random
import re

from rewardsql_jax.sql import execute, results_match
from rewardsql_jax.sql.to_cocte import convert_to_cocte

from ..data import misspell
from .env import Env
from .prompts import action_prompt
from .schema_link import link_tables, schema_text
from .state import Candidate
from .values import retrieve_values

_IDENT = re.compile(r"\b([a-z_][a-z0-9_]*)\b")


def verified_steps(db_path: str, sql: str) -> str | None:
    """The gold query as CoCTE if the rewrite executes to the same result (else None)."""
    try:
        conv = convert_to_cocte(sql)
    except ValueError:
        return None
    gold, pred = execute(db_path, sql), execute(db_path, conv.sql)
    ok = gold.ok and pred.ok and len(gold.columns) == len(pred.columns) and results_match(pred, gold, "bird")
    return conv.sql if ok and conv.sql.strip() != sql.strip() else None


def corrupt(sql: str, columns: list, rng: random.Random) -> str:
    """A wrong variant of ``sql``: a misspelt string literal, a wrong column, or a dropped WHERE."""
    literals = re.findall(r"'([^'%]{4,})'", sql)
    options = ["column"] + (["literal"] if literals else []) + (["where"] if " WHERE " in sql else [])
    kind = rng.choice(options)
    if kind == "literal":
        v = rng.choice(literals)
        return sql.replace(f"'{v}'", f"'{misspell(v, rng)}'", 1)
    if kind == "where":
        return re.sub(r" WHERE .*?(?= GROUP BY| ORDER BY| HAVING| UNION| INTERSECT| EXCEPT|\)|$)", "", sql, count=1)
    used = [w for w in _IDENT.findall(sql) if w in columns]
    if not used:
        return sql + " LIMIT 0"
    col = rng.choice(used)
    other = rng.choice([c for c in columns if c != col] or [col + "x"])
    return re.sub(rf"\b{col}\b", other if rng.random() < 0.5 else col[:-1], sql, count=1)


def action_examples(ex, env: Env, rng: random.Random) -> list:
    """[(prompt, target)] for one training question (see the module docstring)."""
    info = env.schema(ex.db_path)
    hits = retrieve_values(env.value_index(ex.db_path), ex.question, top_k=3)
    values = tuple(h.render() for h in hits)
    linked = schema_text(info, link_tables(info, ex.question, [h.table for h in hits]))
    full = schema_text(info)
    schema = rng.choice((full, linked))
    vals = values if rng.random() < 0.6 else None
    out = [(action_prompt("generate", schema, ex.question, values=vals), ex.gold_sql)]
    steps = verified_steps(ex.db_path, ex.gold_sql)
    if steps:
        out.append((action_prompt("steps", schema, ex.question, values=vals), steps))
    columns = sorted({c for _, cols in info.tables for c in cols})
    prev = ex.gold_sql if rng.random() < 0.25 else corrupt(ex.gold_sql, columns, rng)
    res = execute(ex.db_path, prev)
    cand = Candidate(prev, "refine", res.ok, len(res.rows) if res.ok else 0, None if res.ok else res.error)
    feedback = cand.feedback()  # as refine_sql shows it to the action model
    out.append(
        (action_prompt("refine", schema, ex.question, values=vals, previous=prev, feedback=feedback), ex.gold_sql)
    )
    return out
