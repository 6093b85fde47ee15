"""The LM-driven online loop of Algorithm 3 for one question, at the token level.

The context is kept as token segments (prompt, generated steps, encoded ``<results>``) so GRPO trains on
exactly the tokens the policy saw and produced, with the sampler's log-probs (Sec. 4.4, Omega_i). Calls go
through a ``CallBatcher`` ``call(kind, payload)``: kind "policy" takes context ids, kind "action" takes an
action prompt.
"""

from __future__ import annotations

import dataclasses
import itertools

from rewardsql_jax.sql import execute

from ..actions.batching import CallBatcher
from ..actions.episode import finish, take_step
from ..actions.format import format_results
from ..actions.lm import SeededPrompt, action_handlers
from ..actions.state import State
from ..rewards import RewardConfig, episode_reward, score_sql, stop_value
from .trajectory import Segment, encode_text, policy_prompt


@dataclasses.dataclass(frozen=True)
class Rollout:
    """A finished episode: final state, token segments, policy tokens generated, whether a limit stopped it, and
    the working SQL before each policy decision (None where there was none yet)."""

    state: State
    segments: tuple
    policy_tokens: int
    hit_limit: bool
    decision_sqls: tuple = ()


def bind(state: State, call, episode: tuple | None = None) -> State:
    """The state with its env's action models routed through this thread's batched ``call`` (kind ``"action"``,
    or the kind ``env.routes`` names for a slot with its own model). With ``episode`` (the episode's id, a tuple)
    each action prompt goes as ``lm.SeededPrompt(prompt, (*episode, call index))``: a sampling action model draws
    it with a seed of its own (reproducible, independent of the batching)."""
    if episode is not None:
        call = _numbered(call, tuple(episode))
    env = dataclasses.replace(state.env, complete=lambda prompt: call("action", prompt), call=call)
    return dataclasses.replace(state, env=env)


def _numbered(call, episode: tuple):
    counter = itertools.count()

    def numbered(kind, payload):
        if isinstance(payload, str):
            payload = SeededPrompt(payload, (*episode, next(counter)))
        return call(kind, payload)

    return numbered


def policy_episode(
    state: State,
    call,
    tokenizer,
    *,
    max_steps: int,
    max_len: int,
    max_new_tokens: int,
    bind_actions: bool = True,
    episode: tuple | None = None,
) -> Rollout:
    """Run the policy until ``terminate``, ``max_steps`` calls, or the context limit (Algorithm 3).

    ``bind_actions=False`` keeps the state's own ``env.complete`` (e.g. a scripted action model).
    """
    if bind_actions:
        state = bind(state, call, episode)
    segs = [Segment(encode_text(tokenizer, policy_prompt(state.question)), False)]
    generated, decision_sqls = 0, []
    for _ in range(max_steps):
        if sum(len(s.ids) for s in segs) + max_new_tokens > max_len:
            break
        cur = state.current_candidate
        decision_sqls.append(cur.sql if cur else None)
        ids, lps, _ = call("policy", [i for s in segs for i in s.ids])
        generated += len(ids)
        segs.append(Segment(tuple(ids), True, tuple(lps)))
        state = take_step(state, tokenizer.decode(ids, skip_special_tokens=False))
        if state.done:
            break
        segs.append(Segment(encode_text(tokenizer, format_results(state.steps[-1].observation)), False))
    hit = not state.done
    return Rollout(finish(state), tuple(segs), generated, hit, tuple(decision_sqls))


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
    question_id: int
    difficulty: str
    workflow: tuple
    num_calls: int
    policy_tokens: int
    action_tokens: int
    final_sql: str | None
    executable: bool
    exact: bool
    reward: float
    step_values: tuple = ()  # per policy decision: the reward of terminating there (None: no SQL yet / not asked)


def initial_state(ex, env) -> State:
    return State(question=ex.question, db_path=ex.db_path, difficulty=ex.difficulty, env=env)


def record(ex, state: State, policy_tokens: int, reward_cfg: RewardConfig, decision_sqls=()) -> EpisodeRecord:
    """The scored episode; with ``decision_sqls`` (``Rollout.decision_sqls``) also its ``step_values``
    (``rewards.stop_value`` of the working SQL before each decision after the first)."""
    gold = execute(ex.db_path, ex.gold_sql)
    scores: dict = {}

    def scored(sql):
        if sql not in scores:
            scores[sql] = score_sql(ex.db_path, sql, gold, reward_cfg)
        return scores[sql]

    r = scored(state.final_sql)
    values = tuple(
        None if t == 0 or sql is None else stop_value(scored(sql), t, reward_cfg) for t, sql in enumerate(decision_sqls)
    )
    return EpisodeRecord(
        ex.question_id,
        ex.difficulty,
        state.workflow,
        state.num_calls,
        policy_tokens,
        state.action_tokens,
        state.final_sql,
        r.executable,
        r.exact,
        episode_reward(r, state.num_calls, reward_cfg),
        values,
    )


def run_policy_episodes(
    examples,
    env,
    tokenizer,
    policy_server,
    action_server,
    *,
    max_steps: int,
    reward_cfg: RewardConfig = RewardConfig(),
    repeats: int = 1,
    episode_key: tuple = (),
    step_values: bool = False,
    desc: str | None = None,
):
    """(records, rollouts) for ``repeats`` policy episodes per example (prompt-major, like GRPO groups).
    Episode ``(*episode_key, question_id, repeat)``'s action calls are seeded from that id (``bind``).
    ``step_values``: score the working SQL before each decision too (``EpisodeRecord.step_values``, per-step credit).

    ``action_server``: the built-in action model's ``ModelServer`` or ``{call kind: handler}`` (``actions.lm.action_handlers``);
    ``None`` keeps ``env.complete`` as the action model (e.g. a scripted one). ``desc``: a progress bar's name.
    """
    handlers = {"policy": policy_server.serve}
    if action_server is not None:
        handlers.update(action_handlers(action_server, tokenizer))
    batcher = CallBatcher(handlers)
    items = [(ex, r) for ex in examples for r in range(repeats)]
    jobs = [
        lambda call, ex=ex, r=r: policy_episode(
            initial_state(ex, env),
            call,
            tokenizer,
            max_steps=max_steps,
            max_len=policy_server.max_len,
            max_new_tokens=policy_server.max_new_tokens,
            bind_actions=action_server is not None,
            episode=(*episode_key, ex.question_id, r),
        )
        for ex, r in items
    ]
    rollouts = batcher.run(jobs, desc)
    records = [
        record(ex, ro.state, ro.policy_tokens, reward_cfg, ro.decision_sqls if step_values else ())
        for (ex, _), ro in zip(items, rollouts)
    ]
    return records, rollouts
