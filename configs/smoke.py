"""A < 2-minute run of every stage on a tiny generated benchmark (what CI's pipeline test runs)."""

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
    name="smoke",
    run_dir="runs/smoke",
    data=DataConfig(n_train_dbs=2, n_test_dbs=1, questions_per_db=12, schema_examples=0),
    model=ModelConfigSection(
        vocab_size=800, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_len=1024
    ),
    sft=SFTConfig(steps=6, batch_size=4, lr=3e-3, warmup_steps=1),
    prm_labels=PRMLabelConfig(
        num_questions=4, rollouts_per_question=2, completions_per_step=2, search_budget=2, max_new_tokens=24
    ),
    prm=PRMConfig(steps=3, batch_size=4),
    rl=RLConfig(steps=2, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=24),
    inference=InferenceConfig(best_of_n=2, max_new_tokens=24),
)
