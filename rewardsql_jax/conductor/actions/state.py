"""The orchestration state s_t of a workflow (SQLConductor Sec. 3, Eq. 3) and its pure update.

A state holds the question, the database, the intermediate artefacts the actions produced (linked
schema, retrieved values, SQL candidates with their execution feedback) and the step history
(reasoning, call, observation). ``apply_observation`` is Eq. (3): s_t = Update(s_{t-1}, a_t, o_t).
The ``env`` handle (action model, caches, executor) rides along but is not part of equality.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One SQL candidate with its execution feedback (the evidence refinement and selection read)."""

    sql: str
    source: str
    ok: bool
    n_rows: int = 0
    error: str | None = None
    result_key: int | None = None  # hash of the row set, for execution-consistency voting

    def feedback(self, preview: str = "") -> str:
        if not self.ok:
            return f"error: {self.error}"
        if self.n_rows == 0:
            return "ok, 0 rows (empty result)"
        return f"ok, {self.n_rows} rows{': ' + preview if preview else ''}"


@dataclasses.dataclass(frozen=True)
class Step:
    """One executed step: the policy's reasoning and call text, the action name (None when the call
    was malformed) and the observation written into ``<results>``."""

    reasoning: str
    call: str
    action: str | None
    observation: str


@dataclasses.dataclass(frozen=True)
class Observation:
    """What an action returns: the text shown to the policy and the state fields it changes."""

    text: str
    updates: Mapping = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class State:
    """Orchestration state; ``current`` indexes the working candidate in ``candidates`` (-1: none)."""

    question: str
    db_path: str
    difficulty: str = ""
    linked_schema: str | None = None
    values: tuple | None = None
    candidates: tuple = ()
    current: int = -1
    steps: tuple = ()
    final_sql: str | None = None
    done: bool = False
    action_tokens: int = 0  # action-model prompt + generated tokens spent so far (cost accounting, Sec. 5.3)
    env: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def current_candidate(self) -> Candidate | None:
        return self.candidates[self.current] if 0 <= self.current < len(self.candidates) else None

    @property
    def workflow(self) -> tuple:
        """The action-level abstraction of the trajectory (Sec. 3: tau = (a_1, ..., a_T)); malformed calls skipped."""
        return tuple(s.action for s in self.steps if s.action is not None)

    @property
    def num_calls(self) -> int:
        return len(self.steps)


def apply_observation(state: State, reasoning: str, call: str, action: str | None, obs: Observation) -> State:
    """Eq. (3): append the step and apply the action's updates (unknown fields are a programming error)."""
    unknown = set(obs.updates) - {f.name for f in dataclasses.fields(State)}
    if unknown:
        raise ValueError(f"action {action!r} tried to update unknown state fields {sorted(unknown)}")
    step = Step(reasoning=reasoning, call=call, action=action, observation=obs.text)
    return dataclasses.replace(state, **obs.updates, steps=state.steps + (step,))
