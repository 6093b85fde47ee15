"""Pallas kernels, importable as ``rewardsql_jax.kernels`` (see DESIGN.md: top-level ``kernels`` is another PyPI package's name).

This folder is the package ``rewardsql_jax.kernels``: pyproject.toml maps it there (``package-dir``), so a wheel
installs these files as ``rewardsql_jax/kernels/*.py`` and no top-level ``kernels``. In a source checkout or an
editable install, ``rewardsql_jax/kernels/__init__.py`` runs this file as the package's own code.
"""

from .decode_attention import decode_attention
from .dispatch import AttentionImpl, attention_impl
from .flash_attention import flash_attention, flash_attention_from_mask
from .prefix_decode import prefix_decode_attention
from .reference import decode_attention_reference, mha_reference
