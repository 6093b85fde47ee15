"""SQLConductor's trainers on the shared harness (SQLConductor Sec. 4.4): a stopped SFT / curriculum-GRPO run
resumes from its checkpoint to the parameters of an uninterrupted run, micro-batches train as one batch, and the
GRPO loop's loss, options and advantages are the registered ``conductor_curriculum_grpo`` algorithm's."""

import jax
import numpy as np
import pytest
from flax import nnx
from tiny_shapes import tiny_model

from rewardsql_jax import losses
from rewardsql_jax.conductor.actions.format import format_step
from rewardsql_jax.conductor.config import ConductorRLConfig, ConductorRunConfig
from rewardsql_jax.conductor.rewards import RewardConfig
from rewardsql_jax.conductor.training.grpo import train_grpo
from rewardsql_jax.conductor.training.rollout import EpisodeRecord
from rewardsql_jax.conductor.training.sft import SFTSample, new_model, train_conductor_sft
from rewardsql_jax.data.examples import Example
from rewardsql_jax.losses.grpo import grpo, grpo_needs
from rewardsql_jax.rewards import group_advantages
from rewardsql_jax.rl import get_algorithm, policy_loss
from rewardsql_jax.stages.run_config import MeshConfig, RunConfig
from rewardsql_jax.training.collate import encode_pair
from rewardsql_jax.training.fit import StoppedEarly

from _conductor_helpers import scripted_env

SHAPE = tiny_model(vocab_size=330, max_len=512)
GOLD = "SELECT name FROM singer WHERE country = 'Brazil'"


def _params(model):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(model, nnx.Param))]


def _assert_params(a, b, **tol):
    for x, y in zip(_params(a), _params(b), strict=True):
        if tol:
            np.testing.assert_allclose(x, y, **tol)
        else:
            np.testing.assert_array_equal(x, y)


def _samples(tok):
    pairs = [
        ("question: How many singers are from Brazil?\n", "<reasoning>x</reasoning><call>generate_sql()</call>"),
        ("question: How many songs?\n", "<call>terminate()</call>"),
        ("question: Singers from France?\n", "<reasoning>values</reasoning><call>retrieve_values()</call>"),
        ("question: Oldest singer?\n", "<call>link_schema()</call>"),
    ]
    return [SFTSample(*encode_pair(tok, p, t)) for p, t in pairs]


def _sft(tok, **kw):
    opts = dict(
        steps=6, batch_size=2, lr=1e-2, pad_id=tok.pad_token_id, seed=3, warmup_steps=2, reduction="sequence_mean"
    )
    return train_conductor_sft(new_model(SHAPE, tok, 0), _samples(tok), **{**opts, **kw})


def test_sft_stopped_after_k_steps_resumes_to_the_uninterrupted_params(tokenizer, tmp_path):
    whole, curve = _sft(tokenizer)
    with pytest.raises(StoppedEarly, match="stopped after 3"):
        _sft(tokenizer, checkpoint_dir=tmp_path / "sft", checkpoint_every=2, stop_after=3)
    resumed, resumed_curve = _sft(tokenizer, checkpoint_dir=tmp_path / "sft", checkpoint_every=2)
    _assert_params(resumed, whole)
    assert resumed_curve == curve
    again, _ = _sft(tokenizer, checkpoint_dir=tmp_path / "sft")  # finished: restored, not retrained
    _assert_params(again, whole)


def test_sft_micro_batches_train_as_one_batch(tokenizer):
    one, _ = _sft(tokenizer, steps=3)
    two, _ = _sft(tokenizer, steps=3, micro_batches=2)
    _assert_params(one, two, rtol=0, atol=2e-5)


class _ScriptedPolicy:
    """A policy server without sampling: in every batch of first steps, rows alternate generate_sql / terminate
    (so each group of 2 has one executable and one empty answer: non-zero advantages), then terminate."""

    max_len, max_new_tokens = 512, 64

    def __init__(self, tok, seed):
        self.tok, self.seed = tok, seed

    def serve(self, prompts):
        out = []
        for i, ids in enumerate(prompts):
            first = "<call>" not in self.tok.decode(ids, skip_special_tokens=False)
            call = ("generate_sql()", "terminate()")[(i + self.seed) % 2] if first else "terminate()"
            new = self.tok(format_step("", call), add_special_tokens=False).input_ids
            out.append((new, [-0.5] * len(new), True))
        return out


def _grpo(tok, db, rl=None, **kw):
    env = scripted_env({"generate": "SELECT name FROM singer WHERE country = 'Brasil'", "refine": GOLD, "steps": GOLD})
    questions = [
        Example(question_id=i, db_id="music", question=q, evidence="", gold_sql=GOLD, difficulty="simple", db_path=db)
        for i, q in enumerate(["Singers from Brasil?", "Names of Brasil singers?"])
    ]
    settings = dict(steps=3, prompts_per_step=2, samples_per_prompt=2, kl_beta=0.01, lr=1e-2)
    cfg = ConductorRLConfig(**{**settings, **(rl or {})})
    return train_grpo(
        new_model(SHAPE, tok, 0),
        questions,
        env,
        tok,
        lambda m, t, s: _ScriptedPolicy(tok, s),
        None,
        cfg,
        RewardConfig(),
        max_steps=3,
        pad_id=tok.pad_token_id,
        seed=1,
        **kw,
    )


def test_grpo_stopped_after_k_steps_resumes_to_the_uninterrupted_params(tokenizer, music_db, tmp_path):
    whole, history = _grpo(tokenizer, music_db)
    assert [h["step"] for h in history] == [0, 1, 2] and all(np.isfinite(h["loss"]) for h in history)
    with pytest.raises(StoppedEarly, match="stopped after 1"):
        _grpo(tokenizer, music_db, checkpoint_dir=tmp_path / "grpo", stop_after=1)
    resumed, resumed_history = _grpo(tokenizer, music_db, checkpoint_dir=tmp_path / "grpo")
    _assert_params(resumed, whole)
    assert resumed_history == history


def test_grpo_trains_the_loss_rl_loss_names(tokenizer, music_db):
    """rl.loss reaches the conductor's GRPO as the Reward-SQL pipeline's: a registered policy-gradient loss
    (here GRPO doubled) is the one trained, so its first step (same policy, same rollouts) logs twice the loss."""

    @losses.register("test_doubled_grpo", family="policy_gradient", needs=grpo_needs, override=True)
    def doubled(logprobs, old_logprobs, advantages, mask, **options):
        loss, metrics = grpo(logprobs, old_logprobs, advantages, mask, **options)
        return 2.0 * loss, metrics

    _, plain = _grpo(tokenizer, music_db, rl={"steps": 1})
    _, doubled_history = _grpo(tokenizer, music_db, rl={"steps": 1, "loss": "test_doubled_grpo"})
    assert plain[0]["reward"] == doubled_history[0]["reward"]
    np.testing.assert_allclose(doubled_history[0]["loss"], 2.0 * plain[0]["loss"], rtol=1e-5)
    with pytest.raises(ValueError, match="fills advantages but the reinforce_pp loss reads token_rewards"):
        ConductorRLConfig(loss="reinforce_pp")


def test_grpo_micro_batches_train_as_one_batch(tokenizer, music_db):
    one, h1 = _grpo(tokenizer, music_db)
    two, h2 = _grpo(tokenizer, music_db, micro_batches=2)
    _assert_params(one, two, rtol=0, atol=2e-5)
    assert [h["reward"] for h in h1] == [h["reward"] for h in h2]


def _record(reward):
    return EpisodeRecord(0, "simple", ("terminate",), 1, 1, 0, None, False, False, reward)


def test_the_registered_curriculum_grpo_algorithm():
    algorithm = get_algorithm("conductor_curriculum_grpo")
    cfg = ConductorRLConfig(samples_per_prompt=3, clip_eps=0.3, kl_beta=0.02, temperature=0.7)
    assert algorithm.loss == "grpo" and not algorithm.needs_prm and algorithm.online
    # the conductor's loss comes from rl.policy_loss, as the Reward-SQL pipeline's (k3: the grpo loss's default)
    assert policy_loss(cfg) == ("grpo", {"clip_eps": 0.3, "beta": 0.02, "kl": "k3", "temperature": 0.7})
    assert policy_loss(ConductorRLConfig(loss_options={"agg": "dr_grpo"}))[1]["agg"] == "dr_grpo"
    rewards = [0.0, 0.25, 1.25, 0.5, 0.5, 0.5]
    update = algorithm.update([_record(r) for r in rewards], None, cfg)
    np.testing.assert_array_equal(update.rewards, np.asarray(rewards, np.float32))
    np.testing.assert_allclose(update.advantages, np.asarray(group_advantages(np.asarray(rewards), 3)), atol=1e-7)
    assert np.all(update.advantages[3:] == 0) and algorithm.batch_field == "advantages"

    algorithm.validate(ConductorRunConfig())
    with pytest.raises(ValueError, match="trains SQLConductor"):
        algorithm.validate(RunConfig())
    with pytest.raises(ValueError, match="must divide rl.samples_per_prompt=4"):
        ConductorRunConfig(mesh=MeshConfig(fsdp=1, micro_batches=8), rl=ConductorRLConfig(samples_per_prompt=4))
