"""The embedded default: generated benchmark, BPE tokenizer and a small Qwen2 trained from scratch on CPU."""
from rewardsql_jax.stages.run_config import RunConfig

CONFIG = RunConfig(name="default", run_dir="runs/default")
