"""The tiny from-scratch model shape the tests train in seconds: one layer, width 32, two query heads over one
KV head. ``tiny_model(vocab_size=..., max_len=...)`` gives it as a ``ModelConfigSection``; any field can be
overridden (a wider model for a learning test, more heads for a GQA check)."""

from rewardsql_jax.stages.run_config import ModelConfigSection

TINY_SHAPE = dict(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)


def tiny_model(**fields) -> ModelConfigSection:
    """``ModelConfigSection`` of ``TINY_SHAPE`` with ``fields`` (vocab_size, max_len, ...) set over it."""
    return ModelConfigSection(**{**TINY_SHAPE, **fields})
