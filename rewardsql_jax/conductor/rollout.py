"""The LM-driven online loop of Algorithm 3 for one question, at the token level.

The context is kept as token segments (prompt, generated steps, encoded ``<results>``) so GRPO trains on
exactly the tokens the policy saw and produced, with the sampler's log-probs (Sec. 4.4, Omega_i). Calls go
through a ``CallBatcher`` ``call(kind, payload)``: kind "policy" takes context ids, kind "action" takes an
action prompt.
"""

from __future__ import annotations

import dataclasses

from .episode import finish, take_step
from .format import format_results
from .state import State
from .trajectory import Segment, encode_text, policy_prompt


@dataclasses.dataclass(frozen=True)
class Rollout:
    """A finished episode: final state, token segments, policy tokens generated, whether a limit stopped it."""

    state: State
    segments: tuple
    policy_tokens: int
    hit_limit: bool


def bind(state: State, call) -> State:
    """The state with its env's action models routed through this thread's batched ``call`` (kind ``"action"``,
    or the kind ``env.routes`` names for a slot with its own model)."""
    env = dataclasses.replace(state.env, complete=lambda prompt: call("action", prompt), call=call)
    return dataclasses.replace(state, env=env)


def policy_episode(
    state: State, call, tokenizer, *, max_steps: int, max_len: int, max_new_tokens: int, bind_actions: bool = True
) -> Rollout:
    """Run the policy until ``terminate``, ``max_steps`` calls, or the context limit (Algorithm 3).

    ``bind_actions=False`` keeps the state's own ``env.complete`` (e.g. a scripted action model).
    """
    if bind_actions:
        state = bind(state, call)
    segs = [Segment(encode_text(tokenizer, policy_prompt(state.question)), False)]
    generated = 0
    for _ in range(max_steps):
        if sum(len(s.ids) for s in segs) + max_new_tokens > max_len:
            break
        ids, lps, _ = call("policy", [i for s in segs for i in s.ids])
        generated += len(ids)
        segs.append(Segment(tuple(ids), True, tuple(lps)))
        state = take_step(state, tokenizer.decode(ids, skip_special_tokens=False))
        if state.done:
            break
        segs.append(Segment(encode_text(tokenizer, format_results(state.steps[-1].observation)), False))
    hit = not state.done
    return Rollout(finish(state), tuple(segs), generated, hit)
