"""Pallas kernels. The sources live in the top-level ``kernels/`` folder (DESIGN.md: a top-level
``kernels`` import name belongs to another PyPI package), so this package points its search path there."""
from pathlib import Path as _Path

__path__.append(str(_Path(__file__).resolve().parents[2] / "kernels"))

from .decode_attention import decode_attention  # noqa: E402
from .dispatch import AttentionImpl, attention_impl  # noqa: E402
from .flash_attention import flash_attention, flash_attention_from_mask  # noqa: E402
from .prefix_decode import prefix_decode_attention  # noqa: E402
from .reference import decode_attention_reference, mha_reference  # noqa: E402
