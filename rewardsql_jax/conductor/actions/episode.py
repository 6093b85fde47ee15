"""One orchestration episode: parse the policy's output, run the action, update the state (Algorithm 3).

``take_step`` is the body of Algorithm 3's loop for one policy output; ``run_workflow`` replays a fixed
action sequence (the fixed-workflow baseline, MCTS re-executions); the LM-driven loop lives in
``rollout.py``. A malformed ``<call>``, an unknown action or bad arguments never raise: the message is
written into ``<results>`` so the policy can correct itself, and the step still counts toward the limit.
"""

from __future__ import annotations

import dataclasses

from .format import ParseError, ParsedCall, parse_policy_output
from .registry import ACTIONS, TERMINATE
from .state import Observation, State, apply_observation


def run_action(state: State, name: str, kwargs: dict | None = None, reasoning: str = "") -> State:
    """Invoke action ``name`` and apply its observation (Eq. 3). Unknown names / bad arguments become observations."""
    kwargs = dict(kwargs or {})
    call = ParsedCall(reasoning, name, tuple(sorted(kwargs.items()))).call_text()
    fn = ACTIONS.get(name)
    if fn is None:
        obs = Observation(f"unknown action {name!r}; available actions: {', '.join(sorted(ACTIONS))}")
        return apply_observation(state, reasoning, call, None, obs)
    try:
        obs = fn(state, **kwargs)
    except TypeError as e:  # wrong keyword arguments written by the policy
        return apply_observation(state, reasoning, call, None, Observation(f"bad arguments for {name}: {e}"))
    return apply_observation(state, reasoning, call, name, obs)


def take_step(state: State, policy_output: str) -> State:
    """Parse one policy generation and execute it (or report the parse error as the observation)."""
    parsed = parse_policy_output(policy_output, ACTIONS)
    if isinstance(parsed, ParseError):
        return apply_observation(state, "", parsed.raw, None, Observation(parsed.message))
    return run_action(state, parsed.name, parsed.kwargs, parsed.reasoning)


def finish(state: State) -> State:
    """Terminate at the step limit (Algorithm 3 returns the working SQL of the last state)."""
    if state.done:
        return state
    cur = state.current_candidate
    return dataclasses.replace(state, done=True, final_sql=cur.sql if cur else None)


def run_workflow(state: State, workflow, *, reasoner=None) -> State:
    """Execute a fixed action sequence (names, or (name, kwargs) pairs); stops at ``terminate``.

    ``reasoner(state, name) -> str`` optionally writes the reasoning of each step (curation, Sec. 4.3).
    """
    for item in workflow:
        name, kwargs = (item, {}) if isinstance(item, str) else item
        reasoning = reasoner(state, name) if reasoner is not None else ""
        state = run_action(state, name, kwargs, reasoning)
        if name == TERMINATE:
            break
    return finish(state)
