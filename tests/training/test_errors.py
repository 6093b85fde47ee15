"""User errors get one clear message: unknown loss, wrong batch type or shapes, bad options and configs."""

from __future__ import annotations

import numpy as np
import pytest

from rewardsql_jax import losses
from rewardsql_jax.training.batch import PRMBatch, PreferenceBatch, SFTBatch
from rewardsql_jax.training.optimizer import OptimizerConfig
from rewardsql_jax.training.step import make_train_step

from _train_tiny import rl_batch, sft_batch, tiny_state


def test_unknown_loss_lists_the_registered_names():
    state = tiny_state()
    with pytest.raises(ValueError, match="unknown loss 'gpro'") as err:
        make_train_step(state.graphdef, "gpro")
    for name in losses.names():
        assert name in str(err.value)


def test_mismatched_batch_shapes_name_the_field():
    b = sft_batch()
    with pytest.raises(ValueError, match=r"SFTBatch\.loss_mask has shape \(8, 11\) but input_ids has shape \(8, 12\)"):
        SFTBatch(b.input_ids, b.attention_mask, b.loss_mask[:, :-1]).validate()
    rl = rl_batch()
    with pytest.raises(ValueError, match=r"RLBatch\.old_logprobs has shape"):
        rl.replace(old_logprobs=rl.old_logprobs[:4]).validate()
    with pytest.raises(ValueError, match=r"RLBatch\.advantages has shape \(8, 3\)"):
        rl.replace(advantages=np.zeros((8, 3), np.float32)).validate()
    with pytest.raises(ValueError, match=r"RLBatch\.input_ids must hold integer"):
        rl.replace(input_ids=rl.input_ids.astype(np.float32)).validate()
    with pytest.raises(ValueError, match=r"PRMBatch\.tag_positions must lie in \[0, 12\)"):
        PRMBatch(
            b.input_ids, b.attention_mask, np.full((8, 2), 12, np.int32), np.zeros((8, 2)), np.ones((8, 2))
        ).validate()
    with pytest.raises(ValueError, match=r"PreferenceBatch\.rejected_input_ids has shape"):
        PreferenceBatch(
            b.input_ids, b.attention_mask, b.loss_mask, b.input_ids[:, :5], b.attention_mask, b.loss_mask
        ).validate()


def test_train_step_rejects_bad_batches_before_compiling():
    state = tiny_state()
    step = make_train_step(state.graphdef, "grpo", micro_batches=3)
    with pytest.raises(ValueError, match="trains on RLBatch or GroupedRLBatch, got SFTBatch"):
        step(state, sft_batch())
    with pytest.raises(ValueError, match="batch size 8 is not divisible by micro_batches=3"):
        step(state, rl_batch())
    rl = rl_batch()
    with pytest.raises(ValueError, match=r"RLBatch\.completion_mask has shape"):
        make_train_step(state.graphdef, "grpo")(state, rl.replace(completion_mask=rl.completion_mask[:, 1:]))


def test_missing_inputs_and_options_are_explained():
    state = tiny_state()
    with pytest.raises(ValueError, match="needs reference log-probs"):
        make_train_step(state.graphdef, "grpo", {"beta": 0.1})(state, rl_batch(with_ref=False))
    with pytest.raises(ValueError, match="needs RLBatch.advantages"):
        make_train_step(state.graphdef, "grpo")(state, rl_batch().replace(advantages=None))
    with pytest.raises(ValueError, match="tag_token_ids"):
        b = sft_batch()
        batch = PRMBatch(b.input_ids, b.attention_mask, np.zeros((8, 2), np.int32), np.zeros((8, 2)), np.ones((8, 2)))
        make_train_step(state.graphdef, "prm")(state, batch)
    with pytest.raises(
        ValueError, match=r"loss 'grpo' does not take option\(s\) \['clip_epsilon'\]; it accepts .*clip_eps"
    ):
        make_train_step(state.graphdef, "grpo", {"clip_epsilon": 0.2})
    with pytest.raises(ValueError, match="micro_batches must be a positive integer"):
        make_train_step(state.graphdef, "sft", micro_batches=0)


def test_optimizer_config_is_validated():
    with pytest.raises(ValueError, match="schedule='cosine' needs total_steps"):
        OptimizerConfig(schedule="cosine")
    with pytest.raises(ValueError, match="schedule='warmup' is not supported"):
        OptimizerConfig(schedule="warmup")
    with pytest.raises(ValueError, match="max_grad_norm must be > 0"):
        OptimizerConfig(max_grad_norm=0.0)
    with pytest.raises(ValueError, match="total_steps .* must exceed warmup_steps"):
        OptimizerConfig(schedule="linear", warmup_steps=10, total_steps=10)
