"""AOT memory of one train step of any loss (SFT, PRM, DPO, REINFORCE++), for the pipeline's pre-training check.

``plan_memory`` covers the GRPO RL step and its sampler; ``train_step_stats`` compiles the library's own
``make_train_step`` for an abstract batch of the given class and shapes, allocating nothing, exactly as
``plan_memory`` does for the GRPO batch.
"""

from __future__ import annotations

import jax
import numpy as np

from rewardsql_jax.models.config import ModelConfig
from rewardsql_jax.models.registry import build_model
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.sharding import batch_shardings, state_shardings
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

from .aot import abstract_like, compiled_stats
from .result import CompiledStats


def train_step_stats(
    model_config: ModelConfig,
    mesh,
    batch_type,
    fields: dict,
    *,
    loss: str,
    loss_options: dict | None = None,
    micro_batches: int = 1,
    compute_dtype=None,
    optimizer: OptimizerConfig | None = None,
    reference: bool = False,
    name: str = "train step",
) -> CompiledStats:
    """Per-device compiled stats of ``make_train_step(loss)`` on ``mesh`` for a ``batch_type`` batch whose
    fields are ``{name: (shape, dtype)}``; the state (AdamW, plus a frozen reference copy when
    ``reference``) is abstract. Batch / micro-batch mismatches raise the step's own ValueError."""
    tx = make_optimizer(optimizer or OptimizerConfig())
    state = jax.eval_shape(lambda: create_train_state(build_model(model_config), tx, with_reference=reference))
    step = make_train_step(
        state.graphdef, loss, loss_options, mesh=mesh, micro_batches=micro_batches, compute_dtype=compute_dtype
    )
    # Zero-stride views: real numpy arrays for the step's shape checks, no memory behind them.
    step.validate(batch_type(**{k: np.broadcast_to(np.zeros((), d), s) for k, (s, d) in fields.items()}))
    rows = next(iter(fields.values()))[0][0]
    padded = step.padded_rows(rows)  # rows that do not split over the devices run padded (training.padding)
    abstract = batch_type(**{k: jax.ShapeDtypeStruct((padded, *s[1:]), d) for k, (s, d) in fields.items()})
    batch = abstract_like(abstract, batch_shardings(abstract, mesh))
    lowered = step._build(state, batch, rows).lower(abstract_like(state, state_shardings(state, mesh)), batch)
    return compiled_stats(name, lowered)[0]
