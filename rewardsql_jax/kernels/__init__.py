"""Pallas kernels, importable as ``rewardsql_jax.kernels`` (DESIGN.md: top-level ``kernels`` is another PyPI package).

The kernel modules live in the checkout's top-level ``kernels/`` folder, which has no ``__init__.py`` so that it is
never a regular top-level ``kernels`` package: run from the checkout root, ``import kernels`` still finds the PyPI
package (transformers >= 5.25 imports it). pyproject.toml maps the folder onto this package (``package-dir``) and
ships this file beside it as package data, so a wheel installs ``rewardsql_jax/kernels/*.py`` together; in a source
checkout or an editable install the modules are found through ``__path__`` below.
"""

from pathlib import Path as _Path

if not _Path(__file__).with_name("flash_attention.py").exists():  # a checkout: the modules are in kernels/
    __path__[:] = [str(_Path(__file__).resolve().parents[2] / "kernels")]
del _Path

from .decode_attention import decode_attention  # noqa: E402
from .dispatch import AttentionImpl, attention_impl  # noqa: E402
from .flash_attention import flash_attention, flash_attention_from_mask  # noqa: E402
from .prefix_decode import prefix_decode_attention  # noqa: E402
from .reference import decode_attention_reference, mha_reference  # noqa: E402

__all__ = [
    "AttentionImpl",
    "attention_impl",
    "decode_attention",
    "decode_attention_reference",
    "flash_attention",
    "flash_attention_from_mask",
    "mha_reference",
    "prefix_decode_attention",
]
