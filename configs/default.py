"""The embedded default: a generated benchmark, a BPE tokenizer and a small Qwen2 trained from scratch on
one CPU, through every Reward-SQL stage (cold start -> SFT -> PRM labels -> PRM -> GRPO -> inference -> eval).

Sized for a 2-core CPU (~15 minutes): three training databases (three domains) and three held-out test
databases of the same domains (other rows, other db_ids, the training schema names;
``data.rename_test_schemas=true`` makes the split harder); 120 test questions drawn across them; schemas
without example values (prompts near 300 tokens); sampling at T=0.7 (the paper uses 1.0 with a 7B model).
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
    data=DataConfig(n_train_dbs=3, n_test_dbs=3, questions_per_db=120, max_eval=120, schema_examples=0,
                    rename_test_schemas=False),
    model=ModelConfigSection(vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4,
                             num_kv_heads=2, max_len=1024),
    sft=SFTConfig(steps=500, batch_size=8, lr=3e-3, warmup_steps=20),
    prm_labels=PRMLabelConfig(num_questions=32, rollouts_per_question=4, completions_per_step=4, search_budget=4,
                              temperature=0.7, max_new_tokens=128),
    prm=PRMConfig(steps=60, batch_size=8, lr=1e-3),
    rl=RLConfig(algorithm="grpo", steps=24, prompts_per_step=4, samples_per_prompt=4, lr=5e-5, temperature=0.7,
                max_new_tokens=128),
    inference=InferenceConfig(best_of_n=4, temperature=0.7, aggregation="min", max_new_tokens=128),
)
