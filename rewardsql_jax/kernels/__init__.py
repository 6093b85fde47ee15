"""Pallas kernels. The sources live in the top-level ``kernels/`` folder (DESIGN.md: a top-level
``kernels`` import name belongs to another PyPI package), so this package points its search path there."""
from pathlib import Path as _Path

__path__.append(str(_Path(__file__).resolve().parents[2] / "kernels"))
