"""What actions need from the outside world: the frozen action model, schema / value caches, SQL execution.

``Env.complete(prompt) -> Completion`` is the action LLM (SQLConductor: frozen during policy training);
in the built-in pipeline it is a small Qwen2 sampled through ``rewardsql_jax.sampling.generate`` (via the
cross-episode batcher, see ``batching.py``). Any callable with that signature works, e.g. a scripted
one in tests.

Actions ask through ``Env.ask(slot, prompt)``, ``slot`` being the action's name (or ``"reasoning"`` for
curation's reasoning augmentation). ``routes`` maps the slots that have their own model (a user's checkpoint,
``actions.model_path``) to the batcher's call kind of that model; inside a batched episode (``rollout.bind``)
``call(kind, prompt)`` serves them, and every other slot goes to kind ``"action"`` (the built-in model). Outside
one (``call`` unset) every slot is answered by ``complete``. ``uses_model(slot)`` tells schema linking and the
reasoning writer whether they have a model (else they stay lexical / template-based).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from rewardsql_jax.sql import execute

from .schema_link import SchemaInfo, read_schema
from .state import Candidate
from .values import ValueIndex, index_database


@dataclasses.dataclass(frozen=True)
class Completion:
    """An action-model answer and its cost (prompt and generated token counts)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


def result_key(rows) -> int:
    """Order-insensitive fingerprint of a result (BIRD's set rule), for execution-consistency voting."""
    return hash(frozenset(map(tuple, rows)))


def preview_rows(rows, max_rows: int = 3, max_chars: int = 80) -> str:
    text = ", ".join(str(tuple(r)) for r in rows[:max_rows]) + (" ..." if len(rows) > max_rows else "")
    return text if len(text) <= max_chars else text[:max_chars] + "..."


@dataclasses.dataclass(frozen=True)
class Env:
    """Handles shared by every episode; the caches are filled lazily (one read per database file)."""

    complete: Callable[[str], Completion]
    timeout_s: float = 10.0
    max_rows: int = 10_000
    routes: Mapping = dataclasses.field(default_factory=dict)  # slot -> call kind of its own model
    call: Callable | None = dataclasses.field(default=None, compare=False, repr=False)  # set by rollout.bind
    _schemas: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    _values: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def ask(self, slot: str, prompt: str) -> Completion:
        """``prompt`` answered by the model of ``slot`` (an action name, or ``"reasoning"``)."""
        if self.call is not None:
            return self.call(self.routes.get(slot, "action"), prompt)
        return self.complete(prompt)

    def uses_model(self, slot: str) -> bool:
        """Whether ``slot`` has a model of its own (schema linking / reasoning: else lexical / template)."""
        return slot in self.routes

    def schema(self, db_path) -> SchemaInfo:
        if db_path not in self._schemas:
            self._schemas[db_path] = read_schema(db_path)
        return self._schemas[db_path]

    def value_index(self, db_path) -> ValueIndex:
        if db_path not in self._values:
            self._values[db_path] = index_database(db_path)
        return self._values[db_path]

    def run_sql(self, db_path, sql: str, source: str) -> tuple[Candidate, str]:
        """Execute a candidate in the sandbox; (candidate, preview of its first rows)."""
        res = execute(db_path, sql, timeout_s=self.timeout_s, max_rows=self.max_rows)
        if not res.ok:
            return Candidate(sql=sql, source=source, ok=False, error=res.error or "execution failed"), ""
        return (
            Candidate(sql=sql, source=source, ok=True, n_rows=len(res.rows), result_key=result_key(res.rows)),
            preview_rows(res.rows),
        )
