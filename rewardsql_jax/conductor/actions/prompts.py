"""Prompts of the LLM-backed actions (SQLConductor Sec. 4.1: generation, refinement, multi-round construction,
schema linking) and of the reasoning-augmentation slot (Sec. 4.3).

One short raw-text template per sub-task, so a small action model trained from scratch can learn them:
a task line, the (possibly linked) schema, retrieved values when there are any, the question, and for
refinement the previous SQL with its execution feedback. The model answers with SQL and EOS. Schema linking
(``link_prompt``) and reasoning (``reasoning_prompt``) are asked only of a user's checkpoint
(``actions.model_path``); ``INSTRUCTIONS`` is the system message a chat-templated model gets per task.
"""

from __future__ import annotations

import re

TASKS = ("generate", "refine", "steps")
# Who may be given a model: the LLM-backed actions and the reasoning-augmentation slot of curation
SLOTS = ("generate_sql", "refine_sql", "build_sql_steps", "link_schema", "reasoning")
# The slots the built-in action model serves when no checkpoint is given (the others fall back to no model)
BUILTIN_SLOTS = ("generate_sql", "refine_sql", "build_sql_steps")
CHAT_TEMPLATE_CHOICES = (
    "auto",
    "on",
    "off",
)  # a user's checkpoint: its tokenizer's template if it has one / must / never
INSTRUCTIONS = {
    "generate": "Write one SQLite query that answers the question over the schema. Answer with the SQL only.",
    "refine": "The previous SQLite query may be wrong; its execution feedback is shown. Answer with a corrected "
    "query (or the same one if it is right), SQL only.",
    "steps": "Write one SQLite query as WITH steps (common table expressions, one per line) and a final SELECT. "
    "Answer with the SQL only.",
    "link_schema": "Name the tables of the schema the question needs, comma-separated, nothing else.",
    "reasoning": "In one short sentence, say why the next action is a good step for answering the question.",
}


def action_prompt(
    task: str, schema: str, question: str, *, values=None, previous: str | None = None, feedback: str | None = None
) -> str:
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
        lines += [f"previous: {(previous or '').strip()}", f"feedback: {(feedback or '').strip()}"]
    lines.append("sql:")
    return "\n".join(lines) + " "


def link_prompt(schema: str, question: str, *, values=None) -> str:
    """Schema linking by the action model: the full schema, values, question; ends with ``"tables:"``."""
    lines = ["task: link_schema", "schema:", schema.strip()]
    if values:
        lines.append("values: " + "; ".join(values))
    lines += [f"question: {question.strip()}", "tables:"]
    return "\n".join(lines) + " "


def reasoning_prompt(question: str, history, action: str) -> str:
    """Reasoning augmentation by the action model: the question, the steps so far (``[(action, observation)]``,
    observations cut to their first line) and the next action; ends with ``"why:"``."""
    lines = ["task: reasoning", f"question: {question.strip()}"]
    lines += [f"done: {a} -> {(obs.strip().splitlines() or [''])[0][:160]}" for a, obs in history]
    lines += [f"next: {action}", "why:"]
    return "\n".join(lines) + " "


def task_of(prompt: str) -> str:
    """The task named on a prompt's first line (``"task: generate"`` -> ``"generate"``)."""
    first = prompt.split("\n", 1)[0]
    return first.split(": ", 1)[1].strip() if first.startswith("task: ") else ""


_FENCE = re.compile(r"```[A-Za-z]*\s*\n?(.*?)(?:```|$)", re.S)


def clean_sql(text: str) -> str:
    """The SQL in an action-model answer: the first fenced code block if there is one (chat models), whitespace
    trimmed, a trailing ``;`` dropped."""
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1)
    return text.strip().rstrip(";").strip()


def clean_reasoning(text: str, max_chars: int = 240) -> str:
    """A model-written rationale made safe for ``<reasoning>``: no angle brackets (no tags), one line, capped."""
    text = " ".join(text.replace("<", " ").replace(">", " ").split())
    return text[:max_chars].strip()
