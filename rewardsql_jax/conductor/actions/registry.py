"""The action space A of SQLConductor (Sec. 4.1, Eq. 6, Figure 2) as a registry of plain callables.

An action is ``fn(state, **kwargs) -> Observation``; ``register_action(name, fn)`` adds one (that is all a
new capability needs). The seven built-in actions:

* ``link_schema``      schema linking: lexical (``schema_link``), or by the action model when the user gives one
* ``retrieve_values``  relevant-value retrieval (value index, exact + fuzzy, see ``values``)
* ``generate_sql``     SQL generation by the action model from question + schema (+ linked tables, values)
* ``refine_sql``       SQL refinement by the action model from the working SQL and its execution feedback
* ``build_sql_steps``  multi-round SQL construction: the action model writes CTE steps, each step is executed
* ``select_candidate`` candidate selection by execution consistency (majority over result sets)
* ``terminate``        stop and return the working SQL
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from rewardsql_jax.sql import prefix_sql, split_cocte

from .prompts import action_prompt, clean_sql, link_prompt
from .schema_link import close_over_bridges, link_tables, named_tables, schema_text
from .state import Observation, State
from .values import retrieve_values as _retrieve

ACTIONS: dict[str, Callable] = {}
TERMINATE = "terminate"


def register_action(name: str, fn: Callable | None = None, *, override: bool = False):
    """Register ``fn(state, **kwargs) -> Observation`` as action ``name`` (usable as a decorator)."""

    def add(f):
        if not callable(f):
            raise TypeError(f"action {name!r} must be callable, got {type(f).__name__}")
        if name in ACTIONS and not override:
            raise ValueError(f"action {name!r} is already registered; pass override=True to replace it")
        ACTIONS[name] = f
        return f

    return add(fn) if fn is not None else add


def action_names() -> tuple:
    return tuple(ACTIONS)


def _schema(state: State) -> str:
    return state.linked_schema or schema_text(state.env.schema(state.db_path))


def _new_candidate(state: State, sql: str, source: str, cost: int, extra: str = "") -> Observation:
    cand, preview = state.env.run_sql(state.db_path, sql, source)
    text = f"sql: {sql}\n{extra}{cand.feedback(preview)}"
    return Observation(
        text,
        {
            "candidates": state.candidates + (cand,),
            "current": len(state.candidates),
            "action_tokens": state.action_tokens + cost,
        },
    )


def _ask(state: State, slot: str, prompt: str):
    out = state.env.ask(slot, prompt)
    return clean_sql(out.text), out.prompt_tokens + out.completion_tokens


@register_action("link_schema")
def link_schema(state: State) -> Observation:
    """Lexical linking, or (when ``env.uses_model("link_schema")``) the tables the action model names, plus the
    retrieved values' tables and FK bridges; lexical again if the model names no table of the schema."""
    info = state.env.schema(state.db_path)
    value_tables = [v.split(".", 1)[0] for v in state.values or ()]
    if not state.env.uses_model("link_schema"):
        tables = link_tables(info, state.question, value_tables)
        return Observation(f"tables: {', '.join(tables)}", {"linked_schema": schema_text(info, tables)})
    out = state.env.ask("link_schema", link_prompt(schema_text(info), state.question, values=state.values))
    named = named_tables(info, out.text)
    tables = (
        close_over_bridges(info, set(named) | set(value_tables))
        if named
        else link_tables(info, state.question, value_tables)
    )
    note = "" if named else " (the model named no table of the schema: lexical linking)"
    return Observation(
        f"tables: {', '.join(tables)}{note}",
        {
            "linked_schema": schema_text(info, tables),
            "action_tokens": state.action_tokens + out.prompt_tokens + out.completion_tokens,
        },
    )


@register_action("retrieve_values")
def retrieve_values(state: State, top_k: int = 3) -> Observation:
    hits = _retrieve(state.env.value_index(state.db_path), state.question, top_k=int(top_k))
    values = tuple(h.render() for h in hits)
    return Observation("values: " + ("; ".join(values) if values else "none found"), {"values": values})


@register_action("generate_sql")
def generate_sql(state: State) -> Observation:
    sql, cost = _ask(
        state, "generate_sql", action_prompt("generate", _schema(state), state.question, values=state.values)
    )
    return _new_candidate(state, sql, "generate_sql", cost)


@register_action("refine_sql")
def refine_sql(state: State) -> Observation:
    cur = state.current_candidate
    if cur is None:
        return Observation("no SQL to refine yet; call generate_sql or build_sql_steps first")
    prompt = action_prompt(
        "refine", _schema(state), state.question, values=state.values, previous=cur.sql, feedback=cur.feedback()
    )
    sql, cost = _ask(state, "refine_sql", prompt)
    return _new_candidate(state, sql, "refine_sql", cost)


def _step_report(state: State, sql: str) -> str:
    """Row counts of every CTE step (executed as a prefix), the multi-round construction's feedback."""
    try:
        steps = split_cocte(sql).steps
    except ValueError:
        return ""
    lines = []
    for k, step in enumerate(steps, 1):
        cand, _ = state.env.run_sql(state.db_path, prefix_sql(sql, k), "step")
        lines.append(f"step {k} {step.name}: " + (f"{cand.n_rows} rows" if cand.ok else f"error: {cand.error}"))
    return "".join(line + "\n" for line in lines)


@register_action("build_sql_steps")
def build_sql_steps(state: State) -> Observation:
    sql, cost = _ask(
        state, "build_sql_steps", action_prompt("steps", _schema(state), state.question, values=state.values)
    )
    return _new_candidate(state, sql, "build_sql_steps", cost, extra=_step_report(state, sql))


@register_action("select_candidate")
def select_candidate(state: State) -> Observation:
    usable = [(i, c) for i, c in enumerate(state.candidates) if c.ok and c.n_rows > 0]
    if len(state.candidates) < 2 or not usable:
        return Observation(f"{len(usable)} usable candidate(s) of {len(state.candidates)}; nothing to select")
    votes = collections.Counter(c.result_key for _, c in usable)
    best_key, n = max(votes.items(), key=lambda kv: (kv[1], max(i for i, c in usable if c.result_key == kv[0])))
    pick = max(i for i, c in usable if c.result_key == best_key)
    return Observation(
        f"selected candidate {pick + 1} ({n} of {len(usable)} executable candidates agree): "
        f"{state.candidates[pick].sql}",
        {"current": pick},
    )


@register_action(TERMINATE)
def terminate(state: State) -> Observation:
    cur = state.current_candidate
    return Observation(
        "final: " + (cur.sql if cur else "no SQL"), {"done": True, "final_sql": cur.sql if cur else None}
    )
