"""The previous built-in default, kept for comparison with the pretrained one (configs/default.py): a generated
benchmark, a BPE tokenizer and a small Qwen2 trained from scratch on one CPU, through every Reward-SQL stage (cold start -> SFT -> PRM labels -> PRM -> GRPO -> inference -> eval).

Sized for a 2-core CPU (<= 15 minutes): four training databases (four domains, 400 questions; RL samples the
same questions: ``data.rl_questions_per_db=100`` gives RL questions SFT did not see, measured in
benchmarks/RESULTS.md: SFT then answers 4% of them, so GRPO has almost nothing to learn from) and four held-out test
databases of the same domains (other rows, other db_ids, the training schema names;
``data.rename_test_schemas=true`` makes the split harder) with 400 test questions, so one question is 0.25 EX
points; schemas without example values (prompts near 300 tokens). SFT runs 1,000 steps (500 left the policy
under-trained, with no samples better than greedy) at the cost of 500 before: rows of one database share their
schema prefix in the train step (``sft.prefix_group=4``). PRM labels on 128 questions with 40% of them held out,
class-weighted BCE; GRPO 30 steps of 8 prompts x 8 samples; Best-of-8; sampling at T=0.7 (the paper uses 1.0
with a 7B model).
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
    name="scratch",
    run_dir="runs/scratch",
    data=DataConfig(
        n_train_dbs=4,
        n_test_dbs=4,
        questions_per_db=100,
        max_eval=0,
        schema_examples=0,
        rename_test_schemas=False,
    ),
    model=ModelConfigSection(
        vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4, num_kv_heads=2, max_len=1024
    ),
    sft=SFTConfig(steps=1000, batch_size=8, lr=3e-3, warmup_steps=20, prefix_group=4),
    prm_labels=PRMLabelConfig(
        num_questions=128,
        rollouts_per_question=4,
        completions_per_step=4,
        search_budget=4,
        temperature=0.7,
        max_new_tokens=128,
    ),
    prm=PRMConfig(steps=60, batch_size=8, lr=1e-3, heldout_fraction=0.4, balance="weight"),
    rl=RLConfig(
        algorithm="grpo",
        steps=30,
        prompts_per_step=8,
        samples_per_prompt=8,
        lr=1e-4,
        temperature=0.7,
        max_new_tokens=128,
    ),
    inference=InferenceConfig(best_of_n=8, temperature=0.7, aggregation="min", max_new_tokens=128),
)
