"""What the online and offline RL loops share: the training questions, the train state (SFT policy + frozen
reference), the jitted step of the algorithm's loss, the PRM scorer, and the ``training.fit`` settings (Orbax
checkpoints to resume from, the early stop)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
from flax import nnx

from rewardsql_jax.distributed import gather_rows, owns_row
from rewardsql_jax.models.adapters import adapter_state
from rewardsql_jax.models.lora_io import ADAPTER_CONFIG, load_adapters
from rewardsql_jax.rewards.prm_scoring import PRMScorer
from rewardsql_jax.rl import get_algorithm, policy_loss
from rewardsql_jax.training.collate import rl_length
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import TrainState, create_train_state, merge_model
from rewardsql_jax.training.step import make_train_step
from rewardsql_jax.training.step_checkpoints import StepCheckpoints

from ..context import RunContext
from ..policy import load_model, trainable

STOP_ENV = "REWARDSQL_RL_STOP_AFTER"


class RLStopped(RuntimeError):
    """Raised when ``rl.stop_after`` / ``REWARDSQL_RL_STOP_AFTER`` stops the stage early (after a checkpoint)."""


@dataclasses.dataclass(frozen=True)
class RLData:
    """Training questions whose prompt fits the model with ``max_new_tokens``; their prompt ids; the batch length;
    ``source``: the cold_start file they came from (``rl.jsonl`` or ``train.jsonl``)."""

    records: list
    prompt_ids: list
    length: int
    dropped_too_long: int
    source: str = "train.jsonl"


def rl_questions_file(ctx: RunContext) -> str:
    """``rl.jsonl`` when cold_start wrote RL questions apart from SFT's (``data.rl_questions_per_db > 0``), else
    ``train.jsonl`` (RL on the SFT training questions)."""
    return "rl.jsonl" if (ctx.run_dir / "cold_start" / "rl.jsonl").exists() else "train.jsonl"


def rl_data(ctx: RunContext) -> RLData:
    """The RL stage's questions (online and offline algorithms alike): ``rl_questions_file``'s records."""
    cfg, tok = ctx.config, ctx.tokenizer()
    source = rl_questions_file(ctx)
    records = ctx.records("cold_start", source)
    ids = [tok(r["prompt"], add_special_tokens=False).input_ids for r in records]
    budget = cfg.model.max_len - cfg.rl.max_new_tokens
    keep = [i for i, p in enumerate(ids) if len(p) <= budget]
    if not keep:
        raise ValueError(
            f"no training prompt fits model.max_len={cfg.model.max_len} with rl.max_new_tokens="
            f"{cfg.rl.max_new_tokens}; raise model.max_len or lower rl.max_new_tokens"
        )
    return RLData(
        [records[i] for i in keep],
        [ids[i] for i in keep],
        rl_length(max(len(ids[i]) for i in keep), cfg.rl.max_new_tokens),
        len(records) - len(keep),
        source,
    )


def load_prm_scorer(ctx: RunContext):
    """PRMScorer of ``prm/model``, or a clear error when the prm stage has not run."""
    return PRMScorer(load_model(prm_model_dir(ctx), ctx.config.model, ctx.host_mesh()), ctx.tokenizer())


def prm_model_dir(ctx: RunContext):
    """``prm/model``, or a clear error when the prm stage has not run."""
    path = ctx.run_dir / "prm" / "model"
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"rl.algorithm={ctx.config.rl.algorithm!r} needs the PRM at {path}: run the prm stage "
            f"first (stages=(..., 'prm_labels', 'prm', 'rl')), or use rl.algorithm=grpo_outcome "
            f"or reinforce_pp, which need no PRM"
        )
    return path


@dataclasses.dataclass
class PRMOverPolicyBase:
    """The PRM of a LoRA run as its own adapters over the RL policy's frozen base (``model.lora``).

    The prm stage trained adapters over the SFT policy, which is the RL policy's base as well, so one copy of the
    base serves the policy, its reference (the initial adapters) and the PRM: the PRM adds only its adapters. The
    train step donates the whole state, base included, so ``scorer_for`` rebuilds the PRM over each step's base
    (the same graph: no recompilation, no weights copied)."""

    scorer: PRMScorer
    graphdef: Any
    adapters: nnx.State

    def scorer_for(self, state: TrainState) -> PRMScorer:
        self.scorer.model = merge_model(self.graphdef, self.adapters, state.frozen)
        return self.scorer


def prm_over_policy_base(ctx: RunContext, state: TrainState) -> PRMOverPolicyBase | None:
    """The PRM as adapters over ``state``'s frozen base when both are LoRA models of one base in one process
    (``prm/model/adapter`` exists and the state trains adapters), else None (the PRM is loaded whole)."""
    adapter_dir = prm_model_dir(ctx) / "adapter"
    if state.frozen is None or not (adapter_dir / ADAPTER_CONFIG).exists() or jax.process_count() > 1:
        return None
    prm = load_adapters(state.model(), adapter_dir)  # refuses adapters of another rank, alpha or targets
    return PRMOverPolicyBase(PRMScorer(prm, ctx.tokenizer()), nnx.graphdef(prm), adapter_state(prm))


def prm_scorer_for(prm: PRMScorer | PRMOverPolicyBase, state: TrainState) -> PRMScorer:
    """The scorer to use with ``state`` (``PRMOverPolicyBase`` over its current base)."""
    return prm.scorer_for(state) if isinstance(prm, PRMOverPolicyBase) else prm


def prm_scores(scorer: PRMScorer, prompts: list, responses: list) -> list:
    """The PRM step scores of every row; on a pod each process scores its own rows (row r on process r mod P,
    on its own devices) and the scores are gathered."""
    mine = [i for i in range(len(prompts)) if owns_row(i)]
    return gather_rows(
        "prm scores", len(prompts), scorer.score([prompts[i] for i in mine], [responses[i] for i in mine])
    )


def prm_scorer_if_needed(ctx: RunContext, state: TrainState) -> PRMScorer | PRMOverPolicyBase | None:
    """The PRM when the configured algorithm's reward uses one (``uses_prm``), else None (no PRM loaded): its
    adapters over the policy's base when both are LoRA models (``prm_over_policy_base``), else the whole model."""
    rl = ctx.config.rl
    if not get_algorithm(rl.algorithm).uses_prm(rl):
        return None
    return prm_over_policy_base(ctx, state) or load_prm_scorer(ctx)


def new_state(ctx: RunContext):
    """Train state of the SFT policy with the SFT policy as frozen reference (constant lr, grad clip 1.0),
    sharded over the run's mesh when there is more than one device."""
    model = load_model(ctx.require("sft", "policy"), ctx.config.model, ctx.mesh())
    opt = OptimizerConfig(learning_rate=ctx.config.rl.lr, max_grad_norm=1.0)
    return create_train_state(trainable(model, ctx), make_optimizer(opt), seed=ctx.config.seed, with_reference=True)


def train_step(ctx: RunContext, state):
    """The jitted step of the configured policy loss (``rl.policy_loss``) on the run's mesh, splitting each
    batch into ``mesh.micro_batches``."""
    loss, options = policy_loss(ctx.config.rl)
    return make_train_step(state.graphdef, loss, options, mesh=ctx.mesh(), micro_batches=ctx.config.mesh.micro_batches)


def stop_after(ctx: RunContext) -> int:
    """Steps this process may run before stopping (0 = no limit)."""
    return int(os.environ.get(STOP_ENV, "0") or 0) or ctx.config.rl.stop_after


def checkpoints(ctx: RunContext) -> StepCheckpoints:
    """The RL stage's Orbax checkpoints (``rl/checkpoint``), which ``training.fit`` resumes from."""
    return StepCheckpoints(ctx.stage_dir("rl"), name="rl")


def fit_options(ctx: RunContext) -> dict:
    """The ``training.fit`` settings both RL loops share: checkpoints, their cadence and the early stop."""
    rl = ctx.config.rl
    return dict(
        steps=rl.steps,
        desc=f"rl ({rl.algorithm})",
        name="rl",
        checkpoints=checkpoints(ctx),
        checkpoint_every=rl.checkpoint_every,
        stop_after=stop_after(ctx),
        stop_error=RLStopped,
        stop_reason=f"{STOP_ENV} / rl.stop_after",
        log=lambda rec: ctx.log({"stage": "rl", **rec}),
    )
