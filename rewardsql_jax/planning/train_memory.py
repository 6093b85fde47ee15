"""Compiled memory of the train steps the pipeline runs (SFT, PRM, RL), for the stage memory rows.

The step of a training stage is the library's own ``make_train_step`` compiled for an abstract batch at
``model.max_len`` (bucketed: an upper bound, the stages pad to their longest example) on the run's mesh, the state
(AdamW, plus the frozen reference for RL) abstract: nothing is allocated. ``compile_layers=k`` compiles k - 1
and k layers with the real widths and extrapolates linearly (``planning.aot.extrapolate_layers``), for large models.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    from rewardsql_jax.planning.result import CompiledStats

_PRM_MAX_STEPS = 16  # step tags per PRM row in the estimate (a few KB: does not move the peak)


@dataclasses.dataclass(frozen=True)
class TrainStepMemory:
    """Compiled stats of one stage's train step, what it trains (``what``) and the knob that lowers its rows."""

    stats: CompiledStats
    what: str
    knob: str


def _fields(kind: str, rows: int, seq: int) -> dict:
    i32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    tok = {"input_ids": ((rows, seq), i32), "attention_mask": ((rows, seq), i32)}
    if kind == "sft":
        return {**tok, "loss_mask": ((rows, seq), i32)}
    if kind == "prm":
        steps = ((rows, _PRM_MAX_STEPS), i32)
        return {**tok, "tag_positions": steps, "labels": steps, "step_mask": steps}
    if kind in ("advantages", "token_rewards"):  # an online algorithm's RLBatch
        return {
            **tok,
            "completion_mask": ((rows, seq), i32),
            "old_logprobs": ((rows, seq), f32),
            kind: ((rows, seq), f32),
        }

    def side(s):
        return {
            f"{s}_input_ids": ((rows, seq), i32),
            f"{s}_attention_mask": ((rows, seq), i32),
            f"{s}_loss_mask": ((rows, seq), i32),
        }

    return {**side("chosen"), **side("rejected")}  # preference


def _step_spec(config, stage: str):
    """(batch class, field kind, rows, loss, options, reference, what to lower to fit) of a step the planner's
    RL plan does not cover."""
    from rewardsql_jax.rl import get_algorithm, policy_loss
    from rewardsql_jax.rl.algorithm import OfflineAlgorithm, OnlineAlgorithm
    from rewardsql_jax.training.batch import PRMBatch, PreferenceBatch, RLBatch, SFTBatch

    if stage == "sft":
        return SFTBatch, "sft", config.sft.batch_size, "sft", None, False, "sft.batch_size"
    if stage == "prm":
        return PRMBatch, "prm", config.prm.batch_size, "prm", {"tag_token_ids": (1, 2)}, False, "prm.batch_size"
    rl = config.rl
    algorithm, (loss, options) = get_algorithm(rl.algorithm), policy_loss(rl)
    if algorithm.online:
        rows = rl.prompts_per_step * rl.samples_per_prompt
        return RLBatch, cast(OnlineAlgorithm, algorithm).batch_field, rows, loss, options, True, "rl.prompts_per_step"
    batch_type = cast(OfflineAlgorithm, algorithm).batch_type
    kind = {PreferenceBatch: "preference", SFTBatch: "sft"}[batch_type]
    return batch_type, kind, rl.prompts_per_step, loss, options, True, "rl.prompts_per_step"


def planned_by_the_rl_plan(config) -> bool:
    """Whether ``planning.plan_from_run_config`` plans the RL stage: every online algorithm (its loss is a
    policy-gradient loss, which the plan compiles with the batch field the loss reads)."""
    from rewardsql_jax.rl import get_algorithm

    return get_algorithm(config.rl.algorithm).online


def train_step_memory(config, stage: str, devices, *, compile_layers: int | None = None) -> TrainStepMemory:
    """Compiled per-device stats of the ``stage`` (sft, prm or rl) train step on the run's mesh."""
    from rewardsql_jax.planning import model_config_of, planning_mesh
    from rewardsql_jax.planning.aot import check_compile_layers, extrapolate_layers
    from rewardsql_jax.planning.steps import train_step_stats
    from rewardsql_jax.training.collate import bucket_length

    batch_type, kind, rows, loss, options, reference, knob = _step_spec(config, stage)
    m, seq = config.mesh, bucket_length(config.model.max_len)
    mesh = planning_mesh((m.data, m.fsdp, m.tensor), devices)
    cfg = model_config_of(config).replace(remat=config.model.remat)

    def stats(model_config):
        return train_step_stats(
            model_config,
            mesh,
            batch_type,
            _fields(kind, rows, seq),
            loss=loss,
            loss_options=options,
            micro_batches=config.micro_batches(stage),
            reference=reference,
            name=f"{stage} train step",
        )

    check_compile_layers(compile_layers)
    layers = cfg.num_hidden_layers
    if compile_layers is None or compile_layers >= layers:
        compiled = stats(cfg)
    else:
        k = compile_layers
        lower, upper = (stats(cfg.replace(num_hidden_layers=n)) for n in (k - 1, k))
        compiled = extrapolate_layers(lower, upper, k, layers)
    return TrainStepMemory(compiled, f"{stage} train step ({loss} loss, {rows} rows x {seq} tokens)", knob)


def train_state_bytes(config, devices) -> tuple[int, int, int]:
    """(policy, reference, AdamW moments) bytes per device of the RL train state on the run's mesh (with LoRA: base
    + adapters, the reference's adapters, the adapters' moments)."""
    import jax

    from rewardsql_jax.models.registry import build_model
    from rewardsql_jax.planning import model_config_of, planning_mesh, shard_bytes
    from rewardsql_jax.planning.aot import policy_bytes
    from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
    from rewardsql_jax.training.sharding import state_shardings
    from rewardsql_jax.training.state import create_train_state

    m = config.mesh
    mesh = planning_mesh((m.data, m.fsdp, m.tensor), devices)
    tx = make_optimizer(OptimizerConfig())
    cfg = model_config_of(config)
    state = jax.eval_shape(lambda: create_train_state(build_model(cfg), tx, with_reference=True))
    sh = state_shardings(state, mesh)
    return (
        policy_bytes(state, sh),
        shard_bytes(state.ref_params, sh.ref_params),
        shard_bytes(state.opt_state, sh.opt_state),
    )


def raise_micro_batches(config, stage: str) -> str:
    """The advice to split the ``stage`` (sft, prm or rl) train step into more micro-batches, naming its setting."""
    n = config.micro_batches(stage)
    if stage not in ("sft", "prm"):
        return f"raise mesh.micro_batches (now {n})"
    own = getattr(config, stage).micro_batches
    return f"raise {stage}.micro_batches (now {n}{'' if own else ', from mesh.micro_batches'})"
