"""The learning test of SQLConductor's curriculum GRPO (Sec. 4.4): through its real loop (``grpo.train_grpo``:
batched multi-step episodes of the sampled policy, the real actions, execution rewards, the registered
algorithm's group advantages, the masked RL batch and the shared train step) the policy must get better at a task
it can only learn from reward, and must not when the advantages' sign is flipped.

The task: every question names a country misspelt ("Brasil"); the scripted frozen action model writes the SQL
with the question's spelling unless retrieved values are in its prompt, so only the workflow
``retrieve_values -> generate_sql -> terminate`` is right (reward 1.8: executable, ExecF1 1, exact bonus) and
``generate_sql -> terminate`` returns an empty result (reward 0.2). The policy is SFT-ed briefly on both
workflows, one retrieve-first trajectory per four generate-first ones. The measure is the exact-match rate of 16
episodes per question at the RL temperature, before and after. Measured at seed 0 (``REWARDSQL_LEARNING_SEED``
picks another): 0.10 after SFT; 0.78 after 12 GRPO steps (per-step rollout EX 0.19 -> 0.75-0.91), 0.0 with the
advantages' sign flipped; the test runs 10 steps and asks for 0.05-0.3 at the start, >= 0.6 (and twice the start)
after, at most start + 0.05 for the control.
"""

from __future__ import annotations

import os
import re
import sqlite3

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_shapes import tiny_model

from rewardsql_jax.conductor.actions.env import Completion, Env
from rewardsql_jax.conductor.actions.episode import run_workflow
from rewardsql_jax.conductor.actions.lm import ModelServer
from rewardsql_jax.conductor.config import ConductorRLConfig
from rewardsql_jax.conductor.rewards import RewardConfig
from rewardsql_jax.conductor.training import grpo
from rewardsql_jax.conductor.training.rollout import initial_state, run_policy_episodes
from rewardsql_jax.conductor.training.sft import SFTSample, new_model, train_conductor_sft
from rewardsql_jax.conductor.training.tokenizer import stop_ids
from rewardsql_jax.conductor.training.trajectory import results_mask
from rewardsql_jax.data.examples import Example

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("REWARDSQL_LEARNING_SEED", "0"))
SHAPE = tiny_model(vocab_size=330, hidden_size=64, intermediate_size=128, max_len=512)
COUNTRIES = {
    "Brazil": "Brasil",
    "France": "Frence",
    "Germany": "Germeny",
    "Portugal": "Portugul",
    "Japan": "Japen",
    "Mexico": "Mexiko",
}
RIGHT, WRONG = ("retrieve_values", "generate_sql", "terminate"), ("generate_sql", "terminate")
MAX_STEPS, MAX_NEW, TEMPERATURE, SAMPLES = 4, 32, 1.0, 16
RL = ConductorRLConfig(
    steps=10,
    prompts_per_step=4,
    samples_per_prompt=8,
    lr=2e-3,
    kl_beta=0.01,
    temperature=TEMPERATURE,
    hard_threshold=1.1,
)


def _database(path) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)")
    names = ("Ana", "Bruno", "Clara", "Diego", "Elena", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Karla", "Luis")
    rows = [(i, names[i], country, 20 + i) for i, country in enumerate(list(COUNTRIES) * 2)]
    conn.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return str(path)


def _action_model(prompt: str) -> Completion:
    """Writes ``SELECT name FROM singer WHERE country = '<X>'``: X the retrieved value if the prompt has one, else
    the question's (misspelt) word; refinement and CTE steps change nothing."""
    value = re.search(r"values: singer\.country = '([^']+)'", prompt)
    word = re.search(r"question: Names of the singers from (\w+)\?", prompt)
    sql = f"SELECT name FROM singer WHERE country = '{value.group(1) if value else word.group(1)}'"
    return Completion(sql, len(prompt.split()), len(sql.split()))


def _server(model, tok, temperature, seed):
    return ModelServer(
        model,
        stop_ids=stop_ids(tok),
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=temperature,
        seed=seed,
        max_len=SHAPE.max_len,
    )


def _success(policy, task, seed: int = 12345) -> float:
    questions, env, tok = task["questions"], task["env"], task["tokenizer"]
    records, _ = run_policy_episodes(
        questions, env, tok, _server(policy, tok, TEMPERATURE, seed), None, max_steps=MAX_STEPS, repeats=SAMPLES
    )
    return float(np.mean([r.exact for r in records]))


@pytest.fixture(scope="module")
def task(tokenizer, tmp_path_factory):
    """The questions, the scripted env, and the SFT policy (one RIGHT per four WRONG trajectories) with its rate."""
    db = _database(tmp_path_factory.mktemp("grpo_learning") / "music.sqlite")
    env = Env(complete=_action_model)
    questions = [
        Example(
            question_id=i,
            db_id="music",
            question=f"Names of the singers from {typo}?",
            evidence="",
            gold_sql=f"SELECT name FROM singer WHERE country = '{country}'",
            difficulty="simple",
            db_path=db,
        )
        for i, (country, typo) in enumerate(COUNTRIES.items())
    ]
    samples = []
    for ex in questions:
        for workflow in (RIGHT,) + (WRONG,) * 4:
            state = run_workflow(initial_state(ex, env), workflow)  # empty <reasoning>: the calls are what is learnt
            assert state.final_sql == ex.gold_sql if workflow == RIGHT else state.final_sql != ex.gold_sql
            samples.append(SFTSample(*map(tuple, results_mask(tokenizer, state))))
    policy, _ = train_conductor_sft(
        new_model(SHAPE, tokenizer, SEED),
        samples,
        steps=200,
        batch_size=10,
        lr=1e-2,
        pad_id=tokenizer.pad_token_id,
        seed=SEED,
        reduction="sequence_mean",
        warmup_steps=2,
    )
    out = {"questions": questions, "env": env, "tokenizer": tokenizer, "policy": policy}
    out["start"] = _success(policy, out)
    return out


def _copy(model):
    """A copy with its own buffers: the GRPO train step donates the parameters it is given."""
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(jnp.array, state))


def _train(task):
    tok = task["tokenizer"]
    return grpo.train_grpo(
        _copy(task["policy"]),
        task["questions"],
        task["env"],
        tok,
        lambda m, t, s: _server(m, tok, t, s),
        None,
        RL,
        RewardConfig(),
        max_steps=MAX_STEPS,
        pad_id=tok.pad_token_id,
        seed=SEED,
        log=None,
    )


def test_the_task_starts_low(task):
    assert 0.05 <= task["start"] <= 0.3, f"the SFT policy solves {task['start']:.2f} of the task"


def test_curriculum_grpo_learns_from_reward(task):
    policy, history = _train(task)
    after = _success(policy, task)
    assert after >= 0.6 and after >= 2 * task["start"], f"EX rate {task['start']:.2f} -> {after:.2f}"
    first, last = np.mean([h["ex"] for h in history[:3]]), np.mean([h["ex"] for h in history[-3:]])
    assert last >= first + 0.2, [round(h["ex"], 2) for h in history]  # the rollouts themselves got better


def test_curriculum_grpo_with_the_advantages_sign_flipped_does_not_learn(task, monkeypatch):
    build = grpo.episode_batch  # the one place the advantages become a train batch

    def flipped(rollouts, advantages, pad_id):
        return build(rollouts, -np.asarray(advantages), pad_id)

    monkeypatch.setattr(grpo, "episode_batch", flipped)
    policy, _ = _train(task)
    after = _success(policy, task)
    assert after <= task["start"] + 0.05, f"flipped advantages: EX rate {task['start']:.2f} -> {after:.2f}"
