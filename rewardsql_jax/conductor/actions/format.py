"""The tagged trajectory format and the parser of policy outputs (SQLConductor Sec. 4.3, Figure 4; Alg. 3).

One orchestration step is serialised as

    <reasoning>why</reasoning><call>action_name(key=value, ...)</call><results>observation</results>

``<reasoning>`` and ``<call>`` are policy-generated (supervised / optimised); ``<results>`` is written
by the action module and is only context (masked from every loss, Sec. 4.4 Eq. for m_i). The call is
a Python-like call expression with literal keyword arguments; anything else is reported back to the
policy as an observation (``ParseError``), never raised.
"""

from __future__ import annotations

import ast
import dataclasses
import re

REASONING_OPEN, REASONING_CLOSE = "<reasoning>", "</reasoning>"
CALL_OPEN, CALL_CLOSE = "<call>", "</call>"
RESULTS_OPEN, RESULTS_CLOSE = "<results>", "</results>"
TAGS = (REASONING_OPEN, REASONING_CLOSE, CALL_OPEN, CALL_CLOSE, RESULTS_OPEN, RESULTS_CLOSE)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    """A well-formed policy decision: reasoning text, action name, literal keyword arguments."""

    reasoning: str
    name: str
    args: tuple = ()  # ((key, value), ...) sorted by key, hashable

    @property
    def kwargs(self) -> dict:
        return dict(self.args)

    def call_text(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.args)
        return f"{self.name}({inner})"


@dataclasses.dataclass(frozen=True)
class ParseError:
    """Why a policy output is not a valid step; ``message`` goes back to the policy as the observation."""

    message: str
    raw: str


def format_step(reasoning: str, call: str) -> str:
    """The policy-generated part of a step: ``<reasoning>..</reasoning><call>..</call>``."""
    return f"{REASONING_OPEN}{reasoning}{REASONING_CLOSE}{CALL_OPEN}{call}{CALL_CLOSE}"


def format_results(observation: str) -> str:
    """The action-written part of a step: ``<results>..</results>`` (tags inside are neutralised)."""
    for tag in TAGS:
        observation = observation.replace(tag, tag.replace("<", "&lt;"))
    return f"{RESULTS_OPEN}{observation}{RESULTS_CLOSE}"


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def parse_call_expression(text: str, known_actions) -> ParsedCall | ParseError:
    """``name(k=v, ...)`` -> ParsedCall (reasoning empty); names must be in ``known_actions``."""
    text = text.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return ParseError(f"malformed call {text!r}: expected action_name(key=value, ...)", text)
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return ParseError(f"malformed call {text!r}: expected action_name(key=value, ...)", text)
    name = node.func.id
    if name not in known_actions:
        return ParseError(f"unknown action {name!r}; available actions: {', '.join(sorted(known_actions))}", text)
    if node.args:
        return ParseError(f"call {text!r}: pass arguments by keyword (key=value)", text)
    args = []
    for kw in node.keywords:
        value = _literal(kw.value)
        if kw.arg is None or (value is None and not (isinstance(kw.value, ast.Constant) and kw.value.value is None)):
            return ParseError(f"call {text!r}: argument values must be literals (numbers, strings)", text)
        args.append((kw.arg, value))
    return ParsedCall(reasoning="", name=name, args=tuple(sorted(args)))


def _between(text: str, open_tag: str, close_tag: str) -> str | None:
    start = text.find(open_tag)
    if start < 0:
        return None
    end = text.find(close_tag, start + len(open_tag))
    return None if end < 0 else text[start + len(open_tag) : end]


def parse_policy_output(text: str, known_actions) -> ParsedCall | ParseError:
    """Parse one policy generation (Algorithm 3: e_t from <reasoning>, a_t from <call>).

    Exactly one ``<call>...</call>`` is required; ``<reasoning>`` is optional (empty when absent).
    Never raises: a malformed output comes back as a ``ParseError`` whose message says what to fix.
    """
    if not isinstance(text, str):
        return ParseError(f"policy output must be text, got {type(text).__name__}", repr(text))
    if text.count(CALL_OPEN) != 1 or text.count(CALL_CLOSE) != 1:
        n = text.count(CALL_OPEN)
        what = "no" if n == 0 else ("several" if n > 1 else "an unclosed")
        return ParseError(
            f"malformed output: {what} {CALL_OPEN} block; write exactly one {CALL_OPEN}action_name(...){CALL_CLOSE}",
            text,
        )
    body = _between(text, CALL_OPEN, CALL_CLOSE)
    if body is None:
        return ParseError(f"malformed output: {CALL_CLOSE} comes before {CALL_OPEN}", text)
    parsed = parse_call_expression(body, known_actions)
    if isinstance(parsed, ParseError):
        return ParseError(parsed.message, text)
    reasoning = _between(text, REASONING_OPEN, REASONING_CLOSE) or ""
    return dataclasses.replace(parsed, reasoning=reasoning.strip())
