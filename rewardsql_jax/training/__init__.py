"""Training engine: TrainState pytree, AdamW + schedules, the jitted donated train step with exact gradient
accumulation (losses looked up by name), log-probs, Orbax checkpoints and the one training loop (``fit``)."""

from .batch import (
    GroupedPRMBatch,
    GroupedRLBatch,
    GroupedSFTBatch,
    PRMBatch,
    PreferenceBatch,
    RLBatch,
    RSBatch,
    SFTBatch,
)
from .checkpoint import Checkpointer, export_pretrained, restore_latest
from .fit import FitResult, NonFiniteLossError, StoppedEarly, fit
from .logprobs import sequence_logprobs, summed_logprobs, target_logprobs
from .optimizer import OptimizerConfig, make_optimizer, make_schedule
from .sharding import shard_state, state_shardings
from .state import TrainState, create_train_state
from .step import loss_and_grads, make_train_step
