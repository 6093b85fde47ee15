"""``python -m rewardsql_jax.conductor [--config configs/conductor_default.py] [key=value ...]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rewardsql_jax.config import apply_overrides, load_config

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    from rewardsql_jax.stages.conductor import run_conductor, summary_lines

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(ROOT / "configs" / "conductor_default.py"))
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. policy.sft_steps=50")
    args = parser.parse_args(argv)
    try:
        config = apply_overrides(load_config(args.config), args.overrides)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    results = run_conductor(config)
    print("\n".join(summary_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
