"""Launch the rewardsql_jax pipeline.

    python launch/run.py                                   # built-in default benchmark, no download
    python launch/run.py --config configs/smoke.py         # < 2 minutes
    python launch/run.py --config configs/default.py rl.algorithm=grpo_outcome sft.steps=100
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewardsql_jax.config import apply_overrides, load_config  # noqa: E402
from rewardsql_jax.distributed import maybe_initialize_distributed  # noqa: E402
from rewardsql_jax.stages.report import print_summary  # noqa: E402
from rewardsql_jax.stages.runner import run_pipeline  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.py"), help="a config file in configs/")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. sft.steps=50 run_dir=runs/x")
    args = parser.parse_args(argv)
    try:
        config = apply_overrides(load_config(args.config), args.overrides)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    maybe_initialize_distributed()
    results = run_pipeline(config)
    print_summary(config, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
