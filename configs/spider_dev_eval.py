"""Evaluate a checkpoint or a predictions file on Spider dev (EX, Spider test-suite rule).

    python launch/run.py --config configs/spider_dev_eval.py data.root=../shared/data/spider model.path=<hf dir>
    python launch/run.py --config configs/spider_dev_eval.py data.root=../shared/data/spider \
        inference.predictions_file=<one SQL per line>
"""

from rewardsql_jax.stages.run_config import DataConfig, InferenceConfig, RunConfig

CONFIG = RunConfig(
    name="spider_dev_eval",
    run_dir="runs/spider_dev_eval",
    stages=("cold_start", "inference", "evaluate"),
    data=DataConfig(
        source="spider", root="../shared/data/spider", train_split="", eval_split="dev.json", ex_mode="spider"
    ),
    inference=InferenceConfig(best_of_n=1, temperature=0.0, max_new_tokens=256),
)
