"""The embedded default: a generated benchmark, a BPE tokenizer and a small Qwen2 trained from scratch on
one CPU, through every Reward-SQL stage (cold start -> SFT -> PRM labels -> PRM -> GRPO -> inference -> eval).

Sized for a 2-core CPU (<= 15 minutes): four training databases (four domains, 400 questions) and four held-out
test databases of the same domains (other rows, other db_ids, the training schema names;
``data.rename_test_schemas=true`` makes the split harder) with 400 test questions, so one question is 0.25 EX
points; schemas without example values (prompts near 300 tokens); PRM labels on 128 questions with 40% of them
held out (>= 50 positive held-out steps for the AUC); sampling at T=0.7 (the paper uses 1.0 with a 7B model).
"""

from rewardsql_jax.stages.run_config import (
    DataConfig,
    InferenceConfig,
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
        n_train_dbs=4, n_test_dbs=4, questions_per_db=100, max_eval=0, schema_examples=0, rename_test_schemas=False
    ),
    model=ModelConfigSection(
        vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4, num_kv_heads=2, max_len=1024
    ),
    sft=SFTConfig(steps=500, batch_size=8, lr=3e-3, warmup_steps=20),
    prm_labels=PRMLabelConfig(
        num_questions=128,
        rollouts_per_question=4,
        completions_per_step=4,
        search_budget=4,
        temperature=0.7,
        max_new_tokens=128,
    ),
    prm=PRMConfig(steps=60, batch_size=8, lr=1e-3, heldout_fraction=0.4),
    rl=RLConfig(
        algorithm="grpo",
        steps=40,
        prompts_per_step=4,
        samples_per_prompt=4,
        lr=5e-5,
        temperature=0.7,
        max_new_tokens=128,
    ),
    inference=InferenceConfig(best_of_n=4, temperature=0.7, aggregation="min", max_new_tokens=128),
)
