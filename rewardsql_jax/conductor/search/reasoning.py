"""Reasoning augmentation slot (SQLConductor Sec. 4.3, Algorithm 2): text for each step's ``<reasoning>``.

MCTS trajectories record only actions and outputs; the paper has an LLM write the rationale of every
decision. A writer is any ``writer(state_before, action) -> str``. The built-in ``template_reasoning``
states the evidence the decision rests on (no model). ``augmented_reasoning`` (the pipeline's writer) asks the
action model of slot ``"reasoning"`` when the user gave one (``actions.model_path`` / ``actions.reasoning``) and
falls back to the template when there is none or its answer is empty. ``CachedReasoner`` wraps any writer
with a JSON cache keyed by question, prior workflow and action, so augmentation runs once per decision.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from ..actions.prompts import clean_reasoning, reasoning_prompt
from ..actions.state import State


def template_reasoning(state: State, action: str) -> str:
    """A short rationale from the state's evidence (last candidate's feedback, artefacts present)."""
    cur = state.current_candidate
    failed = cur is not None and not cur.ok
    empty = cur is not None and cur.ok and cur.n_rows == 0
    if action == "link_schema":
        return "Narrow the schema to the tables the question needs."
    if action == "retrieve_values":
        return (
            "The result is empty; a value may be stored differently, so look up stored values."
            if empty
            else "The question names values; look up how they are stored."
        )
    if action == "generate_sql":
        if cur is None:
            return "Write a first SQL query" + (" with the retrieved values." if state.values else ".")
        return "Generate a new query" + (" using the retrieved values." if state.values else ".")
    if action == "refine_sql":
        return (
            "The SQL failed; fix it from the error."
            if failed
            else "The result is empty; fix the query."
            if empty
            else "Check the query against the question and refine it."
        )
    if action == "build_sql_steps":
        return "The question is complex; build the query step by step."
    if action == "select_candidate":
        return "Several candidates exist; keep the one most results agree on."
    if action == "terminate":
        return (
            "The query runs and returns rows; return it."
            if cur is not None and cur.ok and cur.n_rows
            else "Stop with the best query so far."
        )
    return f"Call {action}."


def augmented_reasoning(state: State, action: str) -> str:
    """The action model's rationale for calling ``action`` in ``state`` (slot ``"reasoning"``, cleaned of tags),
    or ``template_reasoning`` when that slot has no model or the model wrote nothing usable."""
    if state.env is None or not state.env.uses_model("reasoning"):
        return template_reasoning(state, action)
    history = [(st.action or "malformed call", st.observation) for st in state.steps]
    text = clean_reasoning(state.env.ask("reasoning", reasoning_prompt(state.question, history, action)).text)
    return text or template_reasoning(state, action)


class CachedReasoner:
    """Memoise ``writer`` on (question, prior workflow, action); persisted to ``path`` (JSON) when given."""

    def __init__(self, writer=template_reasoning, path: str | Path | None = None):
        self.writer, self.path = writer, Path(path) if path else None
        self._lock = threading.Lock()
        self.cache = json.loads(self.path.read_text()) if self.path and self.path.exists() else {}

    def __call__(self, state: State, action: str) -> str:
        key = json.dumps(
            [
                state.question,
                list(state.workflow),
                action,
                state.current_candidate.feedback() if state.current_candidate else "",
            ]
        )
        with self._lock:
            if key in self.cache:
                return self.cache[key]
        text = self.writer(state, action)
        with self._lock:
            self.cache[key] = text
        return text

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.cache, indent=0, sort_keys=True))
