"""The embedded default benchmark (generated SQLite databases + templated questions) and its BPE tokenizer."""

from rewardsql_jax.data.builtin.bpe import EOS_TOKEN, PAD_TOKEN, SINGLE_TOKEN_STRINGS, train_bpe_tokenizer
from rewardsql_jax.data.builtin.generate import BuiltinQuestion, builtin_kinds, make_builtin_benchmark
from rewardsql_jax.data.builtin.questions import KINDS as BUILTIN_KINDS

__all__ = [
    "BUILTIN_KINDS",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SINGLE_TOKEN_STRINGS",
    "BuiltinQuestion",
    "builtin_kinds",
    "make_builtin_benchmark",
    "train_bpe_tokenizer",
]
