"""``ConductorRunConfig``: the SQLConductor pipeline's frozen, validated configuration.

Defaults run the whole method on the built-in benchmark on CPU with two small models trained from scratch
(``configs/conductor_default.py``); ``configs/conductor_smoke.py`` is the CI-sized variant. Paper values
where they exist: top-k = 3 workflows, power alpha = 2, GRPO clip 0.2.

``mesh`` is the pipeline's ``MeshConfig``: the conductor's models are small, so each process trains its own copy on a
mesh of its own devices; the default (all 1) is one device, ``mesh.fsdp=-1`` shards over every local device, and
``mesh.micro_batches`` splits each train batch for exact gradient accumulation.
"""

from __future__ import annotations

import dataclasses
import typing

from rewardsql_jax.config import with_moved_fields
from rewardsql_jax.rl import get_algorithm
from rewardsql_jax.stages.run_config import MeshConfig, ModelConfigSection, OnlineRLConfig, require_positive

from .actions.prompts import CHAT_TEMPLATE_CHOICES
from .actions.registry import ACTIONS
from .data import EVAL_SPLITS
from .rewards import RewardConfig
from .search.explore import ExploreConfig
from .training.curriculum_grpo import NAME as GRPO_ALGORITHM

CREDIT_MODES = ("episode", "step")  # rl.credit: how GRPO assigns an episode's reward to its decisions


@dataclasses.dataclass(frozen=True)
class ConductorData:
    """Built-in benchmark size, the fraction of questions whose quoted value is misspelt (``data.py``), and
    the evaluation split: ``eval_on="heldout_questions"`` holds out every k-th question of each training
    database (unseen questions and values, seen schemas); ``"test_dbs"`` uses the benchmark's test databases
    (unseen schemas with other table/column spellings, far harder for models trained from scratch on CPU).
    """

    n_train_dbs: int = 6
    n_test_dbs: int = 1
    questions_per_db: int = 80
    value_typo_rate: float = 0.5
    max_explore_questions: int = 64  # 0 = every training question
    max_eval_questions: int = 48
    eval_on: str = "heldout_questions"
    heldout_every: int = 4  # heldout_questions: question k of a database is held out when k % 4 == 3
    action_questions_per_db: int = 0  # more questions per training database for the action model's SFT only
    # episodes per evaluation question, each with its own action-call seeds: the action model samples, so a
    # question's EX and calls are the mean over them (less sampling noise in the paired method differences)
    eval_repeats: int = 1

    def __post_init__(self):
        require_positive(self, "n_train_dbs", "n_test_dbs", "questions_per_db", "eval_repeats")
        if self.eval_on not in EVAL_SPLITS:
            raise ValueError(
                f"data.eval_on={self.eval_on!r}; choose one of {', '.join(EVAL_SPLITS)} (held-out "
                f"questions of the training databases, or the benchmark's unseen test databases)"
            )
        if self.action_questions_per_db < 0:
            raise ValueError(f"data.action_questions_per_db must be >= 0, got {self.action_questions_per_db}")
        if self.heldout_every < 2:
            raise ValueError(f"data.heldout_every must be >= 2, got {self.heldout_every}")
        if not 0.0 <= self.value_typo_rate <= 1.0:
            raise ValueError(f"data.value_typo_rate must be in [0, 1], got {self.value_typo_rate}")


@dataclasses.dataclass(frozen=True)
class ActionModelConfig:
    """The frozen action LLM: shape, SFT budget, decoding (sampled LLM calls: ``temperature`` at evaluation and RL,
    one seed a call from the run seed, the episode and the call's index in it; 0 = greedy; ``explore_temperature``
    in exploration)."""

    shape: ModelConfigSection = ModelConfigSection(
        vocab_size=1024, hidden_size=128, intermediate_size=384, num_layers=2, num_heads=4, num_kv_heads=2, max_len=512
    )
    steps: int = 300
    batch_size: int = 16
    lr: float = 3e-3
    max_train_len: int = 256  # longer SFT examples are dropped (keeps one cheap train shape)
    max_new_tokens: int = 64
    explore_temperature: float = 0.8
    temperature: float = 0.7  # evaluation / RL action calls; 0 = greedy

    def __post_init__(self):
        require_positive(self, "steps", "batch_size", "lr", "max_new_tokens", "max_train_len")
        if self.temperature < 0:
            raise ValueError(f"action.temperature={self.temperature}: use >= 0 (0 = greedy)")


@dataclasses.dataclass(frozen=True)
class ActionsConfig:
    """A user's frozen action LLMs (``actions/models.py``): ``model_path`` = a local HF checkpoint dir (weights,
    tokenizer, chat template if any) for every LLM slot; a slot's own field (``actions.refine_sql=DIR``, ...)
    overrides it for that slot. Empty (the default): the built-in action model (``action``, trained from scratch)
    writes SQL, schema linking is lexical and reasoning template-based. ``chat_template``: auto (the tokenizer's
    when it has one) | on | off; ``max_new_tokens`` 0 = ``action.max_new_tokens``."""

    model_path: str = ""
    generate_sql: str = ""
    refine_sql: str = ""
    build_sql_steps: str = ""
    link_schema: str = ""
    reasoning: str = ""
    chat_template: str = "auto"
    dtype: str = "float32"
    max_new_tokens: int = 0

    def __post_init__(self):
        if self.chat_template not in CHAT_TEMPLATE_CHOICES:
            raise ValueError(
                f"actions.chat_template={self.chat_template!r}; choose one of {', '.join(CHAT_TEMPLATE_CHOICES)}"
            )
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"actions.dtype={self.dtype!r}; choose float32, bfloat16 or float16")
        if self.max_new_tokens < 0:
            raise ValueError(
                f"actions.max_new_tokens must be >= 0 (0 = action.max_new_tokens), got {self.max_new_tokens}"
            )


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """The orchestration policy: shape, stability-weighted SFT (top-k, alpha), decoding and step limit."""

    shape: ModelConfigSection = ModelConfigSection(
        vocab_size=1024, hidden_size=64, intermediate_size=192, num_layers=2, num_heads=4, num_kv_heads=2, max_len=1024
    )
    sft_steps: int = 120
    batch_size: int = 8
    lr: float = 3e-3
    top_k: int = 3
    alpha: float = 2.0
    max_steps: int = 6
    max_new_tokens: int = 40

    def __post_init__(self):
        require_positive(self, "sft_steps", "batch_size", "lr", "top_k", "max_steps", "max_new_tokens")


@with_moved_fields
@dataclasses.dataclass(frozen=True)
class ConductorRLConfig(OnlineRLConfig):
    """Curriculum GRPO (Sec. 4.4): the online settings every RL loop shares (``OnlineRLConfig``: group size G
    ``samples_per_prompt``, clip, KL to the SFT policy ``kl_beta``, ``rl.loss`` / ``rl.loss_options``, mini-batches,
    epochs) with the conductor's defaults, plus its own: the curriculum's ``hard_threshold``, the episode reward
    (lambda, exact bonus) and ``credit``. The algorithm is the conductor's; an old setting name fails with the
    shared one (``RENAMED``)."""

    RENAMED: typing.ClassVar[dict] = {"group_size": "samples_per_prompt"}

    algorithm: str = GRPO_ALGORITHM
    steps: int = 4
    prompts_per_step: int = 6
    samples_per_prompt: int = 4
    kl_beta: float = 0.01
    checkpoint_every: int = 1  # a GRPO step samples every rollout: checkpoint after each one
    hard_threshold: float = 1.0
    reward: RewardConfig = RewardConfig()
    # "episode" (the paper): one group-normalised advantage per episode on all its tokens; "step": each decision's
    # advantage is the episode reward less the reward of stopping there (rewards.step_advantages)
    credit: str = "episode"

    def __post_init__(self):
        if self.algorithm != GRPO_ALGORITHM:
            raise ValueError(
                f"rl.algorithm={self.algorithm!r}: SQLConductor's policy trains with its curriculum GRPO "
                f"({GRPO_ALGORITHM!r}); choose its loss with rl.loss instead"
            )
        super().__post_init__()
        if self.credit not in CREDIT_MODES:
            raise ValueError(f"rl.credit={self.credit!r}; choose one of {', '.join(CREDIT_MODES)}")
        if self.filter_groups:
            raise ValueError(
                "rl.filter_groups=true: SQLConductor's episodes have no dynamic sampling (one draw per step); "
                "set rl.filter_groups=false"
            )
        get_algorithm(self.algorithm).check_settings(self)  # before a mesh is known: G >= 2, the loss's field

    def check_layout(self, micro_batches: int) -> None:
        """A GRPO batch is whole groups and a step may have fewer than ``prompts_per_step`` hard questions, so
        ``micro_batches`` divides the group size."""
        if self.samples_per_prompt % micro_batches:
            raise ValueError(
                f"mesh.micro_batches={micro_batches} must divide rl.samples_per_prompt={self.samples_per_prompt}: "
                f"a GRPO batch is whole groups of rollouts and a step may have fewer than rl.prompts_per_step hard "
                f"questions"
            )

    @classmethod
    def moved_field(cls, name: str) -> str | None:
        """The message for a renamed ``rl`` setting (``None`` if ``name`` is no old name)."""
        new = cls.RENAMED.get(name)
        if new is None:
            return None
        return (
            f"rl.{name} was renamed rl.{new} (the name of the pipeline's RLConfig); command line: rl.{new}=...; "
            f"config file: ConductorRLConfig({new}=...)"
        )


@dataclasses.dataclass(frozen=True)
class ConductorRunConfig:
    """Everything ``run_conductor`` needs; ``pipeline = "conductor"`` lets ``launch/run.py`` dispatch on it."""

    pipeline: str = "conductor"
    name: str = "conductor_default"
    run_dir: str = "runs/conductor_default"
    seed: int = 0
    fixed_workflow: tuple = ("generate_sql", "refine_sql", "terminate")
    data: ConductorData = ConductorData()
    action: ActionModelConfig = ActionModelConfig()
    actions: ActionsConfig = ActionsConfig()
    explore: ExploreConfig = ExploreConfig()
    policy: PolicyConfig = PolicyConfig()
    rl: ConductorRLConfig = ConductorRLConfig()
    mesh: MeshConfig = MeshConfig(fsdp=1)
    checkpoint_every: int = 50  # SFT steps between checkpoints (run_dir/checkpoints/); also after the last

    def __post_init__(self):
        if self.pipeline != "conductor":
            raise ValueError(f"ConductorRunConfig.pipeline must be 'conductor', got {self.pipeline!r}")
        require_positive(self, "checkpoint_every")
        m = self.mesh.micro_batches
        for key, size in (("action.batch_size", self.action.batch_size), ("policy.batch_size", self.policy.batch_size)):
            if size % m:
                raise ValueError(
                    f"mesh.micro_batches={m} must divide {key}={size} (each SFT batch splits into equal micro-batches)"
                )
        get_algorithm(GRPO_ALGORITHM).validate(self)
        unknown = [a for a in self.fixed_workflow if a not in ACTIONS]
        if unknown:
            raise ValueError(f"fixed_workflow names unknown actions {unknown}; known: {sorted(ACTIONS)}")
