"""The pipeline's configuration: one frozen, validated dataclass per stage, nested in ``RunConfig``.

Defaults are the embedded benchmark on one CPU (``configs/default.py``); the paper's hyper-parameters
for Qwen2.5-Coder-7B on BIRD live in ``configs/bird_qwen2_5_coder_7b.py``.
"""

from __future__ import annotations

import dataclasses

from rewardsql_jax.config import with_moved_fields
from rewardsql_jax.models.lora import LoRAConfig

STAGES = ("cold_start", "sft", "prm_labels", "prm", "rl", "inference", "evaluate")
AGGREGATIONS = ("min", "product", "last", "average")


def require_positive(obj, *names):
    for name in names:
        if getattr(obj, name) <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be positive, got {getattr(obj, name)}")


def require_choice(obj, name, allowed):
    if getattr(obj, name) not in allowed:
        raise ValueError(f"{type(obj).__name__}.{name}={getattr(obj, name)!r}; choose one of {list(allowed)}")


# data.source=spider: (field, generic split name, Spider question file it stands for)
SPIDER_SPLIT_FILES = (("train_split", "train", "train_spider.json"), ("eval_split", "dev", "dev.json"))


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where questions and databases come from. ``source="builtin"`` generates them (no download).

    ``rl_questions_per_db`` (builtin, spider): > 0 gives the RL stage its own questions, written to
    ``cold_start/rl.jsonl``; 0 = RL on the SFT training questions. builtin: that many more generated per training
    database (gold SQL unlike every SFT question's; fewer where the templates run out). spider: up to that many of
    each training database's questions, at most half of them, drawn with ``seed`` and taken out of the SFT questions
    (paraphrases of one gold query stay on one side, so no gold query is in both; ``data/subsets.py``).

    ``max_eval`` > 0 evaluates a subset of that many questions. builtin: a random one drawn with the run's ``seed``
    (its benchmark is generated per seed anyway). spider / bird: stratified by difficulty (proportional allocation,
    largest-remainder rounding, the file's order kept) and drawn with ``eval_subset_seed``, not ``seed``: every
    seed and method is measured on the same questions.

    ``max_prompt_tokens`` > 0 fits every prompt into that many tokens of the policy tokenizer (fewer example values,
    then whole tables left out from the end of the schema; ``data/prompt_fit.py``); cold_start's metrics say what was
    cut. It needs a pretrained tokenizer (``model.path`` or ``model.tokenizer_path``) and room for every stage's
    ``max_new_tokens`` within ``model.max_len`` (checked by ``RunConfig``). 0 = prompts as rendered.
    """

    source: str = "builtin"  # builtin | spider | bird
    root: str = ""  # dataset root for spider / bird
    train_split: str = "train"  # bird: split name; spider: question file relative to root ("train" =
    # train_spider.json); "" = none (eval only)
    eval_split: str = "dev"  # bird: split name; spider: question file ("dev" = dev.json)
    n_train_dbs: int = 12
    n_test_dbs: int = 6
    questions_per_db: int = 40
    rl_questions_per_db: int = 0  # builtin: RL questions per train DB unseen by SFT; 0 = RL on SFT's questions
    rename_test_schemas: bool = True  # builtin: test DBs use other table/column names than train
    scrambled_train_dbs: int = 0  # builtin: more train DBs whose table/column names are random words (read, not recall)
    schema_examples: int = 3  # M-Schema example values per column
    chat_template: bool = False  # wrap every prompt in the policy tokenizer's chat template (raw M-Schema: the paper)
    max_train: int = 0  # 0 = all
    max_eval: int = 0
    eval_subset_seed: int = 0  # spider / bird: seed of the stratified max_eval subset (independent of the run's seed)
    max_prompt_tokens: int = 0  # > 0: fit every prompt into this many policy tokens (see above); 0 = as rendered
    ex_mode: str = ""  # EX rule: bird (set equality) | spider (test-suite exec match); "" = the data's own
    # rule (spider for data.source=spider, else bird)
    cocte_rewriter: str = "rule"  # gold SQL -> CoCTE: rule (to_cocte) | model (sampled LLM rewrites) | both
    cocte_rewriter_path: str = ""  # model / both (required): local HF checkpoint dir of the rewriting LLM + tokenizer
    cocte_rewriter_chat_template: bool = False  # wrap the rewrite prompt in the rewriter tokenizer's chat template
    cocte_rewrite_samples: int = 4  # rewrites sampled per question
    cocte_rewrite_temperature: float = 0.8
    cocte_rewrite_max_new_tokens: int = 512
    cocte_dedup_keep: float = 0.5  # per-question keep ratio of the tree-edit-distance dedup of verified CoCTEs

    def __post_init__(self):
        require_choice(self, "source", ("builtin", "spider", "bird"))
        if not self.ex_mode:
            object.__setattr__(self, "ex_mode", "spider" if self.source == "spider" else "bird")
        require_choice(self, "ex_mode", ("bird", "spider"))
        if self.source != "builtin" and not self.root:
            raise ValueError(f"data.root is required for data.source={self.source!r} (the dataset folder)")
        if self.source == "spider":  # the generic split names -> Spider's question files (official layout)
            for name, generic, question_file in SPIDER_SPLIT_FILES:
                if getattr(self, name) == generic:
                    object.__setattr__(self, name, question_file)
        require_positive(self, "n_train_dbs", "n_test_dbs", "questions_per_db")
        n_rl = self.rl_questions_per_db
        if not isinstance(n_rl, int) or isinstance(n_rl, bool) or n_rl < 0:
            raise ValueError(f"data.rl_questions_per_db must be a non-negative int, got {n_rl!r}")
        if n_rl and self.source not in ("builtin", "spider"):
            raise ValueError(
                f"data.rl_questions_per_db={n_rl} needs data.source='builtin' or 'spider' (questions of the "
                f"training databases apart from SFT's); with data.source={self.source!r} set it to 0"
            )
        n_scrambled = self.scrambled_train_dbs
        if not isinstance(n_scrambled, int) or isinstance(n_scrambled, bool) or n_scrambled < 0:
            raise ValueError(f"data.scrambled_train_dbs must be a non-negative int, got {n_scrambled!r}")
        if n_scrambled and self.source != "builtin":
            raise ValueError(
                f"data.scrambled_train_dbs={n_scrambled} generates databases: it needs data.source='builtin' "
                f"(got {self.source!r}); set it to 0"
            )
        if n_rl and self.source == "spider" and not self.train_split:
            raise ValueError(
                f"data.rl_questions_per_db={n_rl} takes RL questions out of the training split; data.train_split "
                f"is empty (set it, or set data.rl_questions_per_db=0)"
            )
        for name in ("max_train", "max_eval", "eval_subset_seed", "max_prompt_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"data.{name} must be a non-negative int, got {value!r}")
        require_choice(self, "cocte_rewriter", ("rule", "model", "both"))
        require_positive(self, "cocte_rewrite_samples", "cocte_rewrite_max_new_tokens")
        if self.cocte_rewrite_temperature < 0:
            raise ValueError(f"data.cocte_rewrite_temperature must be >= 0, got {self.cocte_rewrite_temperature}")
        if not 0.0 < self.cocte_dedup_keep <= 1.0:
            raise ValueError(f"data.cocte_dedup_keep must be in (0, 1], got {self.cocte_dedup_keep}")


@dataclasses.dataclass(frozen=True)
class ModelConfigSection:
    """Policy model. ``path`` = a local HF directory, a ``.gguf`` file or ``wheel:<name>`` (docs/models.md); empty =
    a fresh Qwen2 of the shape below (its fields are then used; a pretrained model brings its own shape).
    ``lora``: LoRA adapters (``models.lora.LoRAConfig``: ``model.lora.rank=16 model.lora.targets=q,k,v,o``;
    rank 0 = none)."""

    path: str = ""
    tokenizer_path: str = ""  # empty: the model dir's tokenizer, or a BPE trained on the data
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_len: int = 1024
    dtype: str = "float32"  # compute dtype; weights stay fp32
    # recompute each layer in the backward pass of the sft / prm / rl train steps: activations of about one layer
    # kept instead of all of them, for ~1/3 more compute (same loss and gradients)
    remat: bool = False
    # run the layers of every full-sequence pass (the sft / prm / rl train steps, the sampler's prefill) as one
    # lax.scan over their stacked weights: XLA compiles one layer instead of each (a 30-layer model's step compiles in
    # about half the time, benchmarks/scan_layers.py), for a copy of the layer weights inside each pass
    scan_layers: bool = False
    lora: LoRAConfig = LoRAConfig()

    def __post_init__(self):
        require_positive(
            self, "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "max_len"
        )


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """Cold-start SFT of the policy on Chain-of-CTE targets (paper: lr 1e-5, 3 epochs, batch 16)."""

    steps: int = 300
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    checkpoint_every: int = 0  # > 0: Orbax checkpoint every N steps, a rerun resumes; 0 = a rerun starts over
    # > 1: rows of one database in groups of this size share their schema prefix, computed once per group in the
    # train step (training.prefix_groups; same loss and gradients); 0 / 1 = independent rows
    prefix_group: int = 0
    micro_batches: int = 0  # micro-batches of each SFT batch; 0 = mesh.micro_batches (sized for the RL batch)
    # > 1: each step pads to the shortest of this many lengths (per dimension with prefix_group: the schema prefix
    # and the rest) that holds it, instead of the longest step's (collate.length_ladder): fewer padded tokens, one
    # compile per length used; 1 = one shape for the whole run
    length_buckets: int = 1

    def __post_init__(self):
        require_positive(self, "steps", "batch_size", "lr", "length_buckets")
        if self.checkpoint_every < 0:
            raise ValueError(f"sft.checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if self.micro_batches < 0:
            raise ValueError(f"sft.micro_batches must be >= 0 (0 = mesh.micro_batches), got {self.micro_batches}")
        if self.prefix_group < 0 or (self.prefix_group > 1 and self.batch_size % self.prefix_group):
            raise ValueError(
                f"sft.prefix_group={self.prefix_group} must be 0 (off) or divide sft.batch_size={self.batch_size}"
            )


@dataclasses.dataclass(frozen=True)
class PRMLabelConfig:
    """OmegaPRM-style Monte-Carlo step labels (paper: k=16, c_puct 0.125, alpha 0.5, beta 0.9, L 500)."""

    num_questions: int = 96
    rollouts_per_question: int = 4
    completions_per_step: int = 4  # k
    c_puct: float = 0.125
    alpha: float = 0.5
    beta: float = 0.9
    length_scale: int = 500  # L
    search_budget: int = 8  # MCTS rollouts per question
    temperature: float = 1.0
    max_new_tokens: int = 160
    unparseable: str = "search"  # rollouts sqlglot cannot parse: search | negative (all steps 0) | drop
    dedup_keep: float = 1.0  # per-question keep ratio of the tree-edit-distance dedup (1 = keep all)

    def __post_init__(self):
        require_choice(self, "unparseable", ("search", "negative", "drop"))
        if not 0.0 < self.dedup_keep <= 1.0:
            raise ValueError(f"prm_labels.dedup_keep must be in (0, 1], got {self.dedup_keep}")
        require_positive(
            self, "num_questions", "rollouts_per_question", "completions_per_step", "search_budget", "max_new_tokens"
        )


@dataclasses.dataclass(frozen=True)
class PRMConfig:
    """PRM training (BCE at step tags) on the SFT backbone (paper: as SFT)."""

    steps: int = 150
    batch_size: int = 16
    lr: float = 1e-3
    heldout_fraction: float = 0.2
    annotate_results: bool = False  # add <result>...</result> execution annotations to steps
    balance: str = "none"  # train step labels: none | weight (BCE pos_weight n_neg/n_pos) | downsample
    checkpoint_every: int = 0  # > 0: Orbax checkpoint every N steps, a rerun resumes; 0 = a rerun starts over
    micro_batches: int = 0  # micro-batches of each PRM batch; 0 = mesh.micro_batches (sized for the RL batch)
    # > 1: labelled responses of one database in groups of this size share their prompt prefix (the schema),
    # computed once per group in the train step (GroupedPRMBatch; same loss and gradients); 0 / 1 = independent rows
    prefix_group: int = 0
    # true: with model.lora on, the PRM trains every weight (a full copy beside the LoRA policy) instead of its own
    # adapters: on 64 labelled questions a LoRA PRM reached held-out step AUC 0.59, a fully trained one 0.81
    # (benchmarks/RESULTS.md, 2026-12-03 and 2026-12-06)
    full_finetune: bool = False

    def __post_init__(self):
        require_positive(self, "steps", "batch_size", "lr")
        require_choice(self, "balance", ("none", "weight", "downsample"))
        if self.prefix_group < 0 or (self.prefix_group > 1 and self.batch_size % self.prefix_group):
            raise ValueError(
                f"prm.prefix_group={self.prefix_group} must be 0 (off) or divide prm.batch_size={self.batch_size}"
            )
        if self.micro_batches < 0:
            raise ValueError(f"prm.micro_batches must be >= 0 (0 = mesh.micro_batches), got {self.micro_batches}")
        if self.checkpoint_every < 0:
            raise ValueError(f"prm.checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"prm.heldout_fraction must be in (0, 1), got {self.heldout_fraction}")


@dataclasses.dataclass(frozen=True)
class OnlineRLConfig:
    """The settings of an online RL loop (``stages.rl.online.rl_iteration``), one section composed by both
    pipelines: Reward-SQL's ``RLConfig`` and SQLConductor's ``ConductorRLConfig`` add only their own fields.

    The algorithm and its loss (``rl.loss`` = "" keeps the algorithm's; ``rl.loss_options`` go over the options
    the algorithm gives it), the rollout batch (``prompts_per_step`` questions x ``samples_per_prompt``), the
    optimisation (``lr``, ``mini_batches`` optimizer steps of whole groups for each of ``epochs`` passes), the
    loss's clip / KL / entropy weights, the sampling temperature (the log-probs are taken at it) and DAPO's
    dynamic sampling (``filter_groups``: more draws until every group of the batch has reward spread, at most
    ``filter_groups_max_draws``; group-normalised algorithms only).
    """

    algorithm: str = "grpo"
    loss: str = ""
    loss_options: dict = dataclasses.field(default_factory=dict)
    algorithm_options: dict = dataclasses.field(default_factory=dict)  # checked against its options_type
    steps: int = 20
    prompts_per_step: int = 8
    samples_per_prompt: int = 8
    lr: float = 5e-4
    clip_eps: float = 0.2
    kl_beta: float = 0.001
    entropy_coef: float = 0.0
    temperature: float = 1.0
    checkpoint_every: int = 5  # Orbax checkpoint of the RL state every N steps (and after the last)
    mini_batches: int = 1
    epochs: int = 1
    filter_groups: bool = False
    filter_groups_max_draws: int = 3

    def __post_init__(self):
        from rewardsql_jax.rl import get_algorithm, policy_loss
        from rewardsql_jax.training.step import check_loss_options

        get_algorithm(self.algorithm)  # unknown name: lists the registered algorithms
        check_loss_options(*policy_loss(self), where="rl.loss_options")  # unknown rl.loss / option / choice
        require_positive(
            self, "steps", "prompts_per_step", "samples_per_prompt", "lr", "checkpoint_every", "mini_batches"
        )
        require_positive(self, "epochs", "filter_groups_max_draws")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(
                f"rl.mini_batches={self.mini_batches} must divide rl.prompts_per_step={self.prompts_per_step} "
                f"(each optimizer step trains whole prompt groups)"
            )

    def check_layout(self, micro_batches: int) -> None:
        """How the pipeline splits a step's batch into ``mesh.micro_batches``: raise ValueError naming the fix
        (a pipeline's section adds its own rules)."""


@with_moved_fields
@dataclasses.dataclass(frozen=True)
class RLConfig(OnlineRLConfig):
    """Reward-SQL's RL stage (paper GRPO: lr 1e-6, 48 prompts x 8 samples, clip 0.2, KL k3 0.001, entropy 0.001,
    T=1): the online settings (``OnlineRLConfig``; ``mini_batches``: the paper's 48 prompts x 8 samples in
    mini-batches of 64, verl ppo_mini_batch_size; ``epochs``: verl ppo_epochs, later passes off-policy) and the
    offline algorithms' (dpo, rs), plus the stage's own: completion length, the shared-prefix batch layout,
    prompts per sampler call and ``stop_after`` (resume tests).

    Settings of one algorithm only are its options, ``algorithm_options`` (read as the algorithm's
    ``options_type``, as a plugin's are): grpo ``advantage_variant`` (paper | released) and ``rm_coef``, dpo
    ``beta``, rs ``threshold``; on the command line one at a time, ``rl.algorithm_options.rm_coef=0``. Algorithms:
    grpo (PRM + outcome, Sec. 5.3) | grpo_outcome | grpo_deepseekmath | reinforce_pp | dpo | rs | a plugin's.
    """

    max_new_tokens: int = 160
    stop_after: int = 0  # > 0: stop after N steps, as if killed (resume tests); 0 = run all
    shared_prefix: bool = True  # train each prompt once per group of samples (GroupedRLBatch; same loss)
    prompts_per_sampler_call: int = 0  # prompts per sampler call (a divisor of prompts_per_step); 0 = automatic

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "max_new_tokens")
        if self.stop_after < 0:
            raise ValueError(f"rl.stop_after must be >= 0, got {self.stop_after}")
        if self.prompts_per_sampler_call < 0 or (
            self.prompts_per_sampler_call and self.prompts_per_step % self.prompts_per_sampler_call
        ):
            raise ValueError(
                f"rl.prompts_per_sampler_call={self.prompts_per_sampler_call} must divide "
                f"rl.prompts_per_step={self.prompts_per_step} (every sampler call has one shape), "
                f"or be 0 (automatic: the largest divisor at most half of it)"
            )

    def check_layout(self, micro_batches: int) -> None:
        """``rl.shared_prefix`` splits micro-batches by prompt group: ``micro_batches`` divides the prompts of one
        optimizer step."""
        per_step = self.prompts_per_step // self.mini_batches
        one_step = (
            f"rl.prompts_per_step={per_step}"
            if self.mini_batches == 1
            else f"the prompts of one optimizer step, rl.prompts_per_step / rl.mini_batches = {per_step}"
        )
        if self.shared_prefix and per_step % micro_batches:
            raise ValueError(
                f"rl.shared_prefix=true splits micro-batches by prompt group: mesh.micro_batches={micro_batches} "
                f"must divide {one_step} (or set rl.shared_prefix=false)"
            )

    @classmethod
    def moved_field(cls, name: str) -> str | None:
        """Where an ``rl`` setting of earlier versions lives now (an algorithm's option), or ``None``."""
        from rewardsql_jax.rl import moved_setting

        return moved_setting(name)


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
    """Greedy, PRM Best-of-N (paper: N=32, T=1.0, min aggregation) and self-consistency.

    ``best_of_n=0``: each policy's greedy SQL alone (no candidates, so no Best-of-N, vote or pass@n).
    ``zero_shot``: also decode the pretrained ``model.path`` greedily, each eval prompt wrapped in its tokenizer's chat
    template with an instruction to answer with one SQLite query, the reply begun with a ```sql fence and ``SELECT``
    and ended at the closing fence (``stages/zero_shot.py``); evaluated as the method
    ``zero_shot``. Needs ``model.path`` and raw prompts (``data.chat_template=false``)."""

    predictions_file: str = (
        ""  # evaluate this file (Spider: one SQL per line; BIRD: predict_dev.json) instead of a model
    )
    best_of_n: int = 8
    temperature: float = 1.0
    aggregation: str = "min"
    max_new_tokens: int = 160
    zero_shot: bool = False

    def __post_init__(self):
        require_choice(self, "aggregation", AGGREGATIONS)
        require_positive(self, "max_new_tokens")
        if self.best_of_n < 0:
            raise ValueError(
                f"InferenceConfig.best_of_n must be >= 0 (0: greedy decoding alone, no candidates), got {self.best_of_n}"
            )


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh for training and sampling (axes data, fsdp, tensor; one may be -1 = the rest).

    All 1 on a single device. ``micro_batches`` splits each train batch for exact gradient accumulation.
    """

    data: int = 1
    fsdp: int = -1
    tensor: int = 1
    micro_batches: int = 1

    def __post_init__(self):
        sizes = (self.data, self.fsdp, self.tensor)
        if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
            raise ValueError(
                f"mesh sizes must be positive with at most one -1, got data={self.data}, "
                f"fsdp={self.fsdp}, tensor={self.tensor}"
            )
        require_positive(self, "micro_batches")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything ``launch/run.py`` needs; ``stages`` picks which of ``STAGES`` run (in pipeline order)."""

    name: str = "default"
    run_dir: str = "runs/default"
    seed: int = 0
    stages: tuple = STAGES
    workers: int = 2  # SQL executor processes
    mesh: MeshConfig = MeshConfig()
    data: DataConfig = DataConfig()
    model: ModelConfigSection = ModelConfigSection()
    sft: SFTConfig = SFTConfig()
    prm_labels: PRMLabelConfig = PRMLabelConfig()
    prm: PRMConfig = PRMConfig()
    rl: RLConfig = RLConfig()
    inference: InferenceConfig = InferenceConfig()
    memory_check: str = "auto"  # AOT memory estimate before training: auto | on | off (planning/memory_check.py)
    memory_limit_gb: float = 0.0  # per-device memory the check compares with; 0 = the device's own
    resume: str = "check"  # finished stages: check (stop if their settings changed) | accept_changes
    plugins: tuple = ()  # user .py files imported before the run (their losses / RL algorithms);
    # launch/run.py imports them before it reads the other overrides

    def _check_prompt_budget(self) -> None:
        budget = self.data.max_prompt_tokens
        if not budget:
            return
        if not (self.model.tokenizer_path or self.model.path):
            raise ValueError(
                "data.max_prompt_tokens counts the policy tokenizer's tokens: it needs model.path or "
                "model.tokenizer_path (a tokenizer trained on the data exists only after the prompts)"
            )
        for section in ("prm_labels", "rl", "inference"):
            new = getattr(self, section).max_new_tokens
            if budget + new > self.model.max_len:
                raise ValueError(
                    f"data.max_prompt_tokens={budget} + {section}.max_new_tokens={new} exceeds "
                    f"model.max_len={self.model.max_len}; lower data.max_prompt_tokens to {self.model.max_len - new}"
                )

    def micro_batches(self, stage: str) -> int:
        """Micro-batches of the ``stage`` (sft, prm or rl) train step: ``<stage>.micro_batches``, else
        ``mesh.micro_batches``."""
        own = getattr(self, stage).micro_batches if stage in ("sft", "prm") else 0
        return own or self.mesh.micro_batches

    def check_micro_batches(self, stages) -> None:
        """ValueError naming the setting when the batch of a supervised stage in ``stages`` (sft, prm) does not split
        into its micro-batches; the runner calls it before any stage runs."""
        for stage in ("sft", "prm"):
            section = getattr(self, stage)
            if stage in stages and section.batch_size % self.micro_batches(stage):
                raise ValueError(
                    f"{stage}.batch_size={section.batch_size} is not divisible by its {self.micro_batches(stage)} "
                    f"micro-batches (mesh.micro_batches, sized for the RL batch, unless {stage}.micro_batches is set); "
                    f"set {stage}.micro_batches to a divisor of {section.batch_size}."
                )

    def __post_init__(self):
        require_choice(self, "memory_check", ("auto", "on", "off"))
        require_choice(self, "resume", ("check", "accept_changes"))
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
        require_positive(self, "workers")
        if self.data.chat_template and not (self.model.tokenizer_path or self.model.path):
            raise ValueError(
                "data.chat_template=true needs a pretrained tokenizer with a chat template (model.path or "
                "model.tokenizer_path); a tokenizer trained on the data has none"
            )
        self._check_prompt_budget()
        if self.inference.zero_shot and not self.model.path:
            raise ValueError("inference.zero_shot=true decodes the pretrained model.path; set model.path")
        if self.inference.zero_shot and self.data.chat_template:
            raise ValueError(
                "inference.zero_shot=true wraps the raw eval prompts in the chat template itself; with "
                "data.chat_template=true they are wrapped already (set one of them to false)"
            )
        if "rl" in self.stages:  # the RL settings across sections, before SFT and PRM train for minutes
            from rewardsql_jax.rl import get_algorithm

            get_algorithm(self.rl.algorithm).validate(self)
