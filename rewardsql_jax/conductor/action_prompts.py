"""Prompts of the LLM-backed actions (SQLConductor Sec. 4.1: generation, refinement, multi-round construction).

One short raw-text template per sub-task, so a small action model trained from scratch can learn them:
a task line, the (possibly linked) schema, retrieved values when there are any, the question, and for
refinement the previous SQL with its execution feedback. The model answers with SQL and EOS.
"""
from __future__ import annotations

TASKS = ("generate", "refine", "steps")


def action_prompt(task: str, schema: str, question: str, *, values=None, previous: str | None = None,
                  feedback: str | None = None) -> str:
    """The action model's input for ``task`` (one of ``TASKS``); ends with ``"sql:"`` (the answer follows)."""
    if task not in TASKS:
        raise ValueError(f"unknown action task {task!r}; choose one of {TASKS}")
    if task == "refine" and (previous is None or feedback is None):
        raise ValueError("task 'refine' needs the previous SQL and its execution feedback")
    lines = [f"task: {task}", "schema:", schema.strip()]
    if values:
        lines.append("values: " + "; ".join(values))
    lines.append(f"question: {question.strip()}")
    if task == "refine":
        lines += [f"previous: {previous.strip()}", f"feedback: {feedback.strip()}"]
    lines.append("sql:")
    return "\n".join(lines) + " "


def clean_sql(text: str) -> str:
    """The SQL in an action-model answer: whitespace trimmed, a trailing ``;`` dropped."""
    return text.strip().rstrip(";").strip()
