"""Pallas kernels, importable as ``rewardsql_jax.kernels`` (see DESIGN.md: top-level ``kernels`` is another PyPI package's name)."""
