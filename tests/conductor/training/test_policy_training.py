"""Stability-weighted SFT and GRPO of a tiny policy against a scripted action model (no trained action LM)."""

import dataclasses

import numpy as np
import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.conductor.actions.batching import CallBatcher
from rewardsql_jax.conductor.actions.lm import ModelServer
from rewardsql_jax.conductor.actions.state import State
from rewardsql_jax.conductor.config import ConductorRLConfig
from rewardsql_jax.conductor.rewards import RewardConfig
from rewardsql_jax.conductor.search.curation import curate_question
from rewardsql_jax.conductor.search.explore import ExploreConfig, explore_question
from rewardsql_jax.conductor.training.grpo import curriculum, episode_batch, train_grpo
from rewardsql_jax.conductor.training.rollout import policy_episode
from rewardsql_jax.conductor.training.sft import SFTSample, new_model, train_conductor_sft
from rewardsql_jax.conductor.training.tokenizer import stop_ids
from rewardsql_jax.conductor.training.trajectory import flatten, results_mask
from rewardsql_jax.data.examples import Example

from _conductor_helpers import scripted_env

GOLD = "SELECT name FROM singer WHERE country = 'Brazil'"
SHAPE = tiny_model(vocab_size=330, max_len=512)


def _env():
    return scripted_env(
        {
            "generate": "SELECT name FROM singer WHERE country = 'Brasil'",
            "generate_with_values": GOLD,
            "refine": "SELECT name FROM singer WHERE country = 'Brasil'",
            "steps": "SELECT name FROM singer",
        }
    )


def _server(model, tok, temperature=0.0, seed=0):
    return ModelServer(
        model,
        stop_ids=stop_ids(tok),
        pad_id=tok.pad_token_id,
        max_new_tokens=64,
        temperature=temperature,
        seed=seed,
        max_len=512,
    )


@pytest.mark.slow
def test_weighted_sft_then_policy_reproduces_stable_workflow_and_grpo_runs(tokenizer, music_db):
    state0 = State(question="Singers from Brasil?", db_path=music_db, env=_env())
    search = explore_question(
        0, state0, GOLD, ExploreConfig(num_simulations=30, max_depth=3, reexecutions=2), reasoner=None
    )  # empty <reasoning>: a 1-layer model learns the calls fast
    curated = curate_question(0, search.scores, search.representatives, k=3, alpha=2)
    assert curated and abs(sum(c.weight for c in curated) - 1) < 1e-9
    samples = [SFTSample(*map(tuple, results_mask(tokenizer, c.trajectory)), weight=c.weight) for c in curated]
    policy, curve = train_conductor_sft(
        new_model(SHAPE, tokenizer, 0),
        samples,
        steps=80,
        batch_size=len(samples),
        lr=1e-2,
        pad_id=tokenizer.pad_token_id,
        reduction="sequence_mean",
        warmup_steps=2,
    )
    assert curve[-1][1] < 0.25 * curve[0][1]

    # online loop (Algorithm 3) with the SFT policy: it calls actions itself and reaches the gold SQL
    batcher = CallBatcher({"policy": _server(policy, tokenizer).serve})
    rollout = batcher.run(
        [
            lambda call: policy_episode(
                state0, call, tokenizer, max_steps=5, max_len=512, max_new_tokens=64, bind_actions=False
            )
        ]
    )[0]
    assert rollout.state.workflow in {c.workflow for c in curated}
    assert rollout.state.final_sql == GOLD and not rollout.hit_limit

    ids, mask, lps = flatten(rollout.segments)
    assert sum(mask) == rollout.policy_tokens  # completion mask = exactly the generated tokens
    # the working SQL before each decision (rl.credit=step): none at the first, the final SQL at terminate
    assert len(rollout.decision_sqls) == sum(s.policy for s in rollout.segments)
    assert rollout.decision_sqls[0] is None and rollout.decision_sqls[-1] == GOLD
    assert all(lp == 0.0 for lp, m in zip(lps, mask) if not m)
    batch = episode_batch([rollout, rollout], np.asarray([1.0, -1.0]), tokenizer.pad_token_id)
    assert batch.completion_mask.sum() == 2 * rollout.policy_tokens and batch.input_ids.shape[1] % 64 == 0

    ex = Example(
        question_id=0,
        db_id="music",
        question=state0.question,
        evidence="",
        gold_sql=GOLD,
        difficulty="simple",
        db_path=music_db,
    )
    assert curriculum([ex], {0: 1.0}, 1.0) == [] and curriculum([ex], {0: 0.5}, 1.0) == [ex]
    cfg = ConductorRLConfig(steps=1, prompts_per_step=1, samples_per_prompt=2, kl_beta=0.01)

    def grpo_history(rl_cfg, reward_cfg):
        return train_grpo(
            policy,
            [ex],
            _env(),
            tokenizer,
            lambda m, t, s: _server(m, tokenizer, t, s),
            None,
            rl_cfg,
            reward_cfg,
            max_steps=5,
            pad_id=tokenizer.pad_token_id,
        )[1]

    history = grpo_history(cfg, RewardConfig())
    assert len(history) == 1 and 0.0 <= history[0]["reward"] <= 2.0
    assert "loss" not in history[0] or np.isfinite(history[0]["loss"])
    step_history = grpo_history(
        dataclasses.replace(cfg, credit="step"), RewardConfig(call_cost=0.05)
    )  # per-decision credit
    assert len(step_history) == 1 and ("loss" not in step_history[0] or np.isfinite(step_history[0]["loss"]))
    assert dataclasses.is_dataclass(cfg)
