"""The type checker is part of CI: mypy over the package (``[tool.mypy]`` in pyproject.toml) reports no errors."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_reports_no_errors():
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "rewardsql_jax", "kernels"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, f"mypy found type errors:\n{run.stdout}\n{run.stderr}"
