"""SQLConductor in < 2 minutes on CPU (what CI's tests/conductor/test_conductor_smoke.py runs)."""

from rewardsql_jax.conductor.config import (
    ActionModelConfig,
    ConductorData,
    ConductorRLConfig,
    ConductorRunConfig,
    PolicyConfig,
)
from rewardsql_jax.conductor.search.explore import ExploreConfig
from rewardsql_jax.stages.run_config import ModelConfigSection

CONFIG = ConductorRunConfig(
    name="conductor_smoke",
    run_dir="runs/conductor_smoke",
    data=ConductorData(n_train_dbs=2, n_test_dbs=1, questions_per_db=8, max_explore_questions=4, max_eval_questions=4),
    action=ActionModelConfig(
        shape=ModelConfigSection(
            vocab_size=600, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_len=512
        ),
        steps=4,
        batch_size=4,
        max_new_tokens=16,
        max_train_len=192,
    ),
    explore=ExploreConfig(num_simulations=3, max_depth=2, reexecutions=1, max_patterns=1),
    policy=PolicyConfig(
        shape=ModelConfigSection(
            vocab_size=600, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_len=512
        ),
        sft_steps=4,
        batch_size=4,
        max_steps=3,
        max_new_tokens=16,
    ),
    rl=ConductorRLConfig(steps=1, prompts_per_step=2, samples_per_prompt=2, hard_threshold=1.1),
)
